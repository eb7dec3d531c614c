// Command nullproxy is the baseline of the serve benchmarks: a CRI image
// service that forwards ImageStatus to the runtime and does nothing else,
// over the transport `pullguard serve` runs (criproxy.ServerOptions) and
// through serve's runtime client (criruntime.NewRemote). What serve adds
// over it is pullguard's own cost; what it adds over the runtime is the
// cost of any proxy of this kind on the machine: one more process, one
// more gRPC server half and client half.
//
//	nullproxy --listen /path/to.sock --runtime unix:///run/containerd/containerd.sock
//
// It prints "nullproxy: serving" when it accepts calls and stops on
// SIGTERM or SIGINT. ImageFsInfo is forwarded too (a client checks its
// connection with it); every other call is Unimplemented.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

type server struct {
	runtimeapi.UnimplementedImageServiceServer
	runtime criapi.ImageManagerService
}

func (s *server) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return s.runtime.ImageStatus(ctx, req.GetImage(), req.GetVerbose())
}

// ImageFsInfo is forwarded too: the kubelet's client checks a connection
// with it.
func (s *server) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return s.runtime.ImageFsInfo(ctx)
}

func main() {
	listen := flag.String("listen", "", "the unix socket to serve on")
	endpoint := flag.String("runtime", "", "the runtime's image service endpoint")
	flag.Parse()
	if err := run(*listen, *endpoint); err != nil {
		fmt.Fprintln(os.Stderr, "nullproxy:", err)
		os.Exit(1)
	}
}

func run(listen, endpoint string) error {
	if listen == "" || endpoint == "" {
		return fmt.Errorf("--listen and --runtime are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rt, err := criruntime.NewRemote(ctx, endpoint, time.Minute)
	if err != nil {
		return err
	}
	defer func() { _ = rt.Close(context.Background()) }()
	l, err := net.Listen("unix", listen)
	if err != nil {
		return err
	}
	gs := grpc.NewServer(criproxy.ServerOptions()...)
	runtimeapi.RegisterImageServiceServer(gs, &server{runtime: rt})
	go func() {
		<-ctx.Done()
		gs.Stop()
	}()
	fmt.Println("nullproxy: serving")
	return gs.Serve(l)
}
