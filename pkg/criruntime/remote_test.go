package criruntime_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/critest"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

func TestRemote(t *testing.T) {
	fake := critest.NewImageService()
	fake.Password, fake.ID, fake.UsedBytes = "good", "sha256:"+zeros, 42
	socket := critest.Serve(t, fake)
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
			assert.Equal(t, "alice", fake.LastAuth().GetUsername(), "the auth config reaches the runtime")

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
