package main_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// listOnlyCRI is a CRI image service that lists fixed images.
type listOnlyCRI struct {
	runtimeapi.UnimplementedImageServiceServer
	images []*runtimeapi.Image
}

func (f *listOnlyCRI) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: f.images}, nil
}

func (f *listOnlyCRI) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// serveCRI serves fake on a unix socket until the test ends.
func serveCRI(t *testing.T, fake runtimeapi.ImageServiceServer) string {
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
	return "unix://" + socket
}

func TestRecordsListsRuntimeImagesWithoutRecord(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root)
	require.Equal(t, 0, res.code, res.stderr)

	sideLoaded := "sha256:" + "5e" + "1d" + "e0" + "ad" + "000000000000000000000000000000000000000000000000000000"
	endpoint := serveCRI(t, &listOnlyCRI{images: []*runtimeapi.Image{
		{Id: w.pushed.ConfigDigest, RepoTags: []string{w.reg.Host() + "/team-a/app:v1"}},
		{Id: sideLoaded, RepoTags: []string{"registry.example/side/loaded:1"}},
	}})

	res = pullguard(t, "records", "--root-dir", root, "--runtime", endpoint, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	var doc struct {
		Unrecorded []struct {
			ImageRef string   `json:"imageRef"`
			Names    []string `json:"names"`
		} `json:"unrecorded"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Len(t, doc.Unrecorded, 1)
	assert.Equal(t, sideLoaded, doc.Unrecorded[0].ImageRef)
	assert.Contains(t, doc.Unrecorded[0].Names, "registry.example/side/loaded:1")

	res = pullguard(t, "records", "--root-dir", root, "--runtime", endpoint)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "IMAGES WITHOUT A RECORD (1)")
	assert.Contains(t, res.stdout, "registry.example/side/loaded:1")
	assert.Contains(t, res.stdout, "AlwaysVerify", "the remedy is given")

	res = pullguard(t, "records", "--root-dir", root, "--runtime", "unix://"+filepath.Join(w.dir, "no.sock"))
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "no.sock")
}
