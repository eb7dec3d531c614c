// Command fakecri is a CRI image service standing in for containerd in the
// real-systemd suite, and a CRI client for it.
//
//	fakecri serve SOCKET          serves an image service holding no image:
//	                              ImageFsInfo answers, pulls fail NotFound
//	fakecri fsinfo SOCKET         calls ImageFsInfo, prints OK
//	fakecri pull SOCKET IMAGE USER PASSWORD
//	                              calls PullImage with that credential and
//	                              prints the answer's gRPC code
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/test/systemd/testdata/criclient"
)

type images struct {
	runtimeapi.UnimplementedImageServiceServer
}

func (images) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{UsedBytes: &runtimeapi.UInt64Value{Value: 1}}}}, nil
}

func (images) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{}, nil
}

func (images) ImageStatus(context.Context, *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (images) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	return nil, status.Errorf(codes.NotFound, "failed to pull and unpack image %q: not found", req.GetImage().GetImage())
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: fakecri serve|fsinfo|pull SOCKET ...")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3:]); err != nil {
		fmt.Fprintln(os.Stderr, "fakecri:", err)
		os.Exit(1)
	}
}

func run(mode, socket string, args []string) error {
	if mode == "serve" {
		_ = os.Remove(socket)
		if err := os.MkdirAll(dirOf(socket), 0o755); err != nil {
			return err
		}
		lis, err := net.Listen("unix", socket)
		if err != nil {
			return err
		}
		gs := grpc.NewServer()
		runtimeapi.RegisterImageServiceServer(gs, images{})
		return gs.Serve(lis)
	}
	conn, err := criclient.Dial(socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	c := runtimeapi.NewImageServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	switch mode {
	case "fsinfo":
		if _, err := c.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}, grpc.WaitForReady(true)); err != nil {
			return err
		}
		fmt.Println("OK")
		return nil
	case "pull":
		if len(args) != 3 {
			return fmt.Errorf("pull SOCKET IMAGE USER PASSWORD")
		}
		_, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{
			Image: &runtimeapi.ImageSpec{Image: args[0]},
			Auth:  &runtimeapi.AuthConfig{Username: args[1], Password: args[2]},
		}, grpc.WaitForReady(true))
		fmt.Println(status.Code(err))
		return nil
	}
	return fmt.Errorf("unknown mode %q", mode)
}

func dirOf(path string) string {
	for i := len(path) - 1; i > 0; i-- {
		if path[i] == '/' {
			return path[:i]
		}
	}
	return "/"
}
