package main_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/critest"
)

func TestRecordsListsRuntimeImagesWithoutRecord(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root)
	require.Equal(t, 0, res.code, res.stderr)

	sideLoaded := "sha256:" + "5e" + "1d" + "e0" + "ad" + "000000000000000000000000000000000000000000000000000000"
	endpoint := "unix://" + critest.Serve(t, critest.NewImageService(
		&runtimeapi.Image{Id: w.pushed.ConfigDigest, RepoTags: []string{w.reg.Host() + "/team-a/app:v1"}},
		&runtimeapi.Image{Id: sideLoaded, RepoTags: []string{"registry.example/side/loaded:1"}},
	))

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
