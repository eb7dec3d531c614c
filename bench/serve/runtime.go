//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// registryHost is the registry every image comes from.
const registryHost = "registry.example"

// fakeRuntime is a container runtime's CRI image service holding a fixed
// set of images, served over gRPC on a unix socket as containerd serves
// it, so that serve runs against it exactly as against containerd. It
// counts the calls serve makes. pullguard serve calls only the image
// service (k8s.io/cri-client's ImageFsInfo when it connects, then
// ListImages, ImageStatus, PullImage, RemoveImage); the runtime service is
// the kubelet's alone and is not served.
type fakeRuntime struct {
	runtimeapi.UnimplementedImageServiceServer
	images []*runtimeapi.Image
	byName map[string]*runtimeapi.Image // tags, digests and IDs

	lists, statuses, pulls, fsInfos atomic.Int64
	server                          *grpc.Server
}

// imageName is image i's tagged name: 50 projects, one repository each.
func imageName(i int) string {
	return fmt.Sprintf("%s/proj-%d/app-%d:v1", registryHost, i%50, i)
}

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// newFakeRuntime holds n images, each with one tag and one repo digest, as
// containerd lists a pulled image.
func newFakeRuntime(n int) *fakeRuntime {
	f := &fakeRuntime{byName: make(map[string]*runtimeapi.Image, 3*n)}
	for i := range n {
		name := imageName(i)
		repo := name[:len(name)-len(":v1")]
		img := &runtimeapi.Image{
			Id:          digestOf("config " + name),
			RepoTags:    []string{name},
			RepoDigests: []string{repo + "@" + digestOf("manifest "+name)},
			Size:        uint64(20<<20 + i),
		}
		f.images = append(f.images, img)
		for _, k := range append([]string{img.Id}, append(img.RepoTags, img.RepoDigests...)...) {
			f.byName[k] = img
		}
	}
	return f
}

// serve serves the image service on socket until stop.
func (f *fakeRuntime) serve(socket string) error {
	l, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	f.server = grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(f.server, f)
	go func() { _ = f.server.Serve(l) }()
	return nil
}

func (f *fakeRuntime) stop() { f.server.Stop() }

// calls are the calls serve made to the runtime.
type calls struct{ lists, statuses, pulls, fsInfos int64 }

func (f *fakeRuntime) calls() calls {
	return calls{f.lists.Load(), f.statuses.Load(), f.pulls.Load(), f.fsInfos.Load()}
}

func (c calls) minus(o calls) calls {
	return calls{c.lists - o.lists, c.statuses - o.statuses, c.pulls - o.pulls, c.fsInfos - o.fsInfos}
}

func (c calls) String() string {
	return fmt.Sprintf("ListImages %d, ImageStatus %d, PullImage %d, ImageFsInfo %d", c.lists, c.statuses, c.pulls, c.fsInfos)
}

func (f *fakeRuntime) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	f.lists.Add(1)
	return &runtimeapi.ListImagesResponse{Images: f.images}, nil
}

func (f *fakeRuntime) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	f.statuses.Add(1)
	if req.GetImage().GetImage() == "" {
		return nil, status.Error(codes.InvalidArgument, "no image")
	}
	return &runtimeapi.ImageStatusResponse{Image: f.byName[req.GetImage().GetImage()]}, nil
}

// PullImage answers for a present image as containerd does (the registry
// is not asked here: every pull the benchmark makes should be answered by
// serve from its records, and the benchmark fails if one reaches this).
func (f *fakeRuntime) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	f.pulls.Add(1)
	img := f.byName[req.GetImage().GetImage()]
	if img == nil {
		return nil, status.Error(codes.NotFound, "no such image in the fake registry")
	}
	return &runtimeapi.PullImageResponse{ImageRef: img.Id}, nil
}

func (f *fakeRuntime) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	f.fsInfos.Add(1)
	return &runtimeapi.ImageFsInfoResponse{}, nil
}
