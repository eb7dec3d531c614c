package critest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Serve serves srv on a unix socket until the test ends and returns the
// socket's path. The socket is in a new directory under the system's
// temporary directory, not t.TempDir(): a unix socket's path is limited to
// 108 bytes, which a test's name can exceed.
func Serve(t testing.TB, srv runtimeapi.ImageServiceServer) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "cri.sock")
	lis, err := net.Listen("unix", socket)
	require.NoError(t, err)
	gs := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return socket
}

// ImageService is a CRI image service holding images, each found by its
// ID or by any of its RepoTags, in front of a registry that serves every
// name as one image to one password. It is safe for concurrent use.
type ImageService struct {
	runtimeapi.UnimplementedImageServiceServer

	// Password is the one the registry accepts; a pull with any other
	// fails as containerd fails a registry's 401.
	Password string
	// ID is the image ID the registry serves every name as.
	ID string
	// UsedBytes is what ImageFsInfo reports used.
	UsedBytes uint64

	mu       sync.Mutex
	images   map[string]*runtimeapi.Image // by ID
	lastAuth *runtimeapi.AuthConfig
}

// NewImageService returns an image service that holds images.
func NewImageService(images ...*runtimeapi.Image) *ImageService {
	s := &ImageService{images: map[string]*runtimeapi.Image{}}
	for _, img := range images {
		s.images[img.GetId()] = img
	}
	return s
}

// LastAuth is the credential of the last PullImage.
func (s *ImageService) LastAuth() *runtimeapi.AuthConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastAuth
}

// find is the image with ID or RepoTag name, nil if none; s.mu is held.
func (s *ImageService) find(name string) *runtimeapi.Image {
	if img, ok := s.images[name]; ok {
		return img
	}
	for _, img := range s.images {
		for _, tag := range img.GetRepoTags() {
			if tag == name {
				return img
			}
		}
	}
	return nil
}

func (s *ImageService) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListImagesResponse{}
	for _, img := range s.images {
		resp.Images = append(resp.Images, img)
	}
	return resp, nil
}

func (s *ImageService) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &runtimeapi.ImageStatusResponse{Image: s.find(req.GetImage().GetImage())}, nil
}

func (s *ImageService) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastAuth = req.GetAuth()
	if req.GetAuth().GetPassword() != s.Password {
		return nil, status.Error(codes.Unknown, "failed to pull and unpack image: 401 Unauthorized")
	}
	// The tag moves to the pulled image. Images are replaced, never
	// changed: a listed one may still be being sent.
	name := req.GetImage().GetImage()
	for id, img := range s.images {
		if slices.Contains(img.GetRepoTags(), name) {
			img = proto.Clone(img).(*runtimeapi.Image)
			img.RepoTags = slices.DeleteFunc(img.RepoTags, func(t string) bool { return t == name })
			s.images[id] = img
		}
	}
	img := &runtimeapi.Image{Id: s.ID, Size: 1}
	if old := s.images[s.ID]; old != nil {
		img = proto.Clone(old).(*runtimeapi.Image)
	}
	img.RepoTags = append(img.RepoTags, name)
	s.images[s.ID] = img
	return &runtimeapi.PullImageResponse{ImageRef: s.ID}, nil
}

func (s *ImageService) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if img := s.find(req.GetImage().GetImage()); img != nil {
		delete(s.images, img.GetId())
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (s *ImageService) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{UsedBytes: &runtimeapi.UInt64Value{Value: s.UsedBytes}}}}, nil
}
