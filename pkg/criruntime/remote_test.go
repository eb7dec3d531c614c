package criruntime_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// fakeImageServer is a CRI image service holding images by name.
type fakeImageServer struct {
	runtimeapi.UnimplementedImageServiceServer

	mu       sync.Mutex
	images   map[string]*runtimeapi.Image
	lastAuth *runtimeapi.AuthConfig
}

func (f *fakeImageServer) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ListImagesResponse{}
	for _, img := range f.images {
		resp.Images = append(resp.Images, img)
	}
	return resp, nil
}

func (f *fakeImageServer) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &runtimeapi.ImageStatusResponse{Image: f.images[req.GetImage().GetImage()]}, nil
}

func (f *fakeImageServer) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastAuth = req.GetAuth()
	if req.GetAuth().GetPassword() != "good" {
		return nil, grpcstatus.Error(codes.Unknown, "failed to pull and unpack image: 401 Unauthorized")
	}
	name := req.GetImage().GetImage()
	f.images[name] = &runtimeapi.Image{Id: "sha256:" + zeros, RepoTags: []string{name}, Size: 1}
	return &runtimeapi.PullImageResponse{ImageRef: "sha256:" + zeros}, nil
}

func (f *fakeImageServer) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.images, req.GetImage().GetImage())
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (f *fakeImageServer) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{UsedBytes: &runtimeapi.UInt64Value{Value: 42}}}}, nil
}

// serveFakeCRI starts fake on a unix socket in a temp dir and returns the
// socket path.
func serveFakeCRI(t *testing.T, fake runtimeapi.ImageServiceServer) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri") // short: unix socket paths are limited to 108 bytes
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "cri.sock")
	lis, err := net.Listen("unix", socket)
	require.NoError(t, err)
	srv := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return socket
}

func TestRemote(t *testing.T) {
	fake := &fakeImageServer{images: map[string]*runtimeapi.Image{}}
	socket := serveFakeCRI(t, fake)
	ctx := context.Background()

	for _, endpoint := range []string{"unix://" + socket, socket} {
		t.Run(endpoint, func(t *testing.T) {
			svc, err := criruntime.NewRemote(ctx, endpoint, 10*time.Second)
			require.NoError(t, err)
			t.Cleanup(func() { _ = svc.Close(ctx) })

			_, err = svc.PullImage(ctx, spec("registry.example/team-a/app:v1"), basic("alice", "bad"), nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "401 Unauthorized")

			ref, err := svc.PullImage(ctx, spec("registry.example/team-a/app:v1"), basic("alice", "good"), nil)
			require.NoError(t, err)
			assert.Equal(t, "sha256:"+zeros, ref)
			fake.mu.Lock()
			assert.Equal(t, "alice", fake.lastAuth.GetUsername(), "the auth config reaches the runtime")
			fake.mu.Unlock()

			st, err := svc.ImageStatus(ctx, spec("registry.example/team-a/app:v1"), false)
			require.NoError(t, err)
			assert.Equal(t, ref, st.GetImage().GetId())

			list, err := svc.ListImages(ctx, nil)
			require.NoError(t, err)
			assert.Len(t, list, 1)

			fs, err := svc.ImageFsInfo(ctx)
			require.NoError(t, err)
			assert.Equal(t, uint64(42), fs.ImageFilesystems[0].UsedBytes.Value)

			require.NoError(t, svc.RemoveImage(ctx, spec("registry.example/team-a/app:v1")))
			st, err = svc.ImageStatus(ctx, spec("registry.example/team-a/app:v1"), false)
			require.NoError(t, err)
			assert.Nil(t, st.GetImage())
		})
	}
}

func TestNewRemoteRefusesBadEndpoints(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "not-a-socket")
	require.NoError(t, os.WriteFile(plain, nil, 0o600))

	tests := []struct {
		name     string
		endpoint string
		timeout  time.Duration
		want     string
	}{
		{name: "empty", endpoint: "", timeout: time.Second, want: "empty endpoint"},
		{name: "tcp", endpoint: "tcp://127.0.0.1:1234", timeout: time.Second, want: `scheme "tcp" is not supported`},
		{name: "relative unix url", endpoint: "unix://run/containerd.sock", timeout: time.Second, want: "must be absolute"},
		{name: "missing socket", endpoint: filepath.Join(dir, "missing.sock"), timeout: time.Second, want: "is the container runtime running?"},
		{name: "not a socket", endpoint: plain, timeout: time.Second, want: "is not a unix socket"},
		{name: "zero timeout", endpoint: "unix:///run/containerd/containerd.sock", want: "timeout must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := criruntime.NewRemote(context.Background(), tt.endpoint, tt.timeout)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestParseEndpoint(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	tests := []struct {
		endpoint string
		want     string
		wantErr  bool
	}{
		{endpoint: "unix:///run/containerd/containerd.sock", want: "unix:///run/containerd/containerd.sock"},
		{endpoint: " unix:///run/containerd//containerd.sock ", want: "unix:///run/containerd/containerd.sock"},
		{endpoint: "/run/crio/crio.sock", want: "unix:///run/crio/crio.sock"},
		{endpoint: "state/cri.sock", want: "unix://" + filepath.Join(wd, "state/cri.sock")},
		{endpoint: "unix://relative.sock", wantErr: true},
		{endpoint: "npipe:////./pipe/containerd", wantErr: true},
		{endpoint: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			got, err := criruntime.ParseEndpoint(tt.endpoint)
			if tt.wantErr {
				assert.ErrorIs(t, err, criruntime.ErrInvalidEndpoint)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
