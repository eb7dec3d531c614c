package criruntime_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"

var (
	linuxAmd64   = v1.Platform{OS: "linux", Architecture: "amd64"}
	linuxArm64   = v1.Platform{OS: "linux", Architecture: "arm64"}
	windowsAmd64 = v1.Platform{OS: "windows", Architecture: "amd64"}
)

// platformIndex returns an index of a linux/amd64 and a linux/arm64 image
// and an attestation manifest, and the images by platform.
func platformIndex(t testing.TB) (v1.ImageIndex, map[string]v1.Image) {
	t.Helper()
	images := map[string]v1.Image{}
	idx := v1.ImageIndex(empty.Index)
	for _, p := range []v1.Platform{linuxAmd64, linuxArm64, {OS: "unknown", Architecture: "unknown"}} {
		img := randomImage(t, 2)
		images[p.String()] = img
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, images
}

func usedBytes(t testing.TB, e *criruntime.Embedded) uint64 {
	t.Helper()
	fs, err := e.ImageFsInfo(context.Background())
	require.NoError(t, err)
	require.Len(t, fs.ImageFilesystems, 1)
	return fs.ImageFilesystems[0].UsedBytes.Value
}

// storeWithTwoImages pulls team-a/app:v1 (private) and public/tool:v1.
func storeWithTwoImages(t *testing.T) (*testRegistry, string, *criruntime.Embedded) {
	t.Helper()
	reg := newTestRegistry(t)
	reg.addUser("alice", "alice-pw")
	reg.allow("team-a/app", "alice")
	reg.makePublic("public/tool")
	reg.push(reg.ref("team-a/app:v1"), randomImage(t, 2))
	reg.push(reg.ref("public/tool:v1"), randomImage(t, 1))
	dir := t.TempDir()
	e := newEmbedded(t, dir)
	_, err := e.PullImage(context.Background(), spec(reg.ref("team-a/app:v1")), basic("alice", "alice-pw"), nil)
	require.NoError(t, err)
	_, err = e.PullImage(context.Background(), spec(reg.ref("public/tool:v1")), nil, nil)
	require.NoError(t, err)
	return reg, dir, e
}

func TestImageStatusAndListImages(t *testing.T) {
	reg, _, e := storeWithTwoImages(t)
	app := status(t, e, reg.ref("team-a/app:v1"))
	require.NotNil(t, app)
	require.Len(t, app.RepoDigests, 1)

	tests := []struct {
		name   string
		image  string
		wantID string
	}{
		{name: "by tag", image: reg.ref("team-a/app:v1"), wantID: app.Id},
		{name: "by repo digest", image: app.RepoDigests[0], wantID: app.Id},
		{name: "by tag and digest", image: reg.ref("team-a/app:v1@") + strings.SplitN(app.RepoDigests[0], "@", 2)[1], wantID: app.Id},
		{name: "by image ID", image: app.Id, wantID: app.Id},
		{name: "other tag", image: reg.ref("team-a/app:v2")},
		{name: "unknown ID", image: "sha256:" + zeros},
		{name: "not pulled", image: "alpine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := status(t, e, tt.image)
			list, err := e.ListImages(context.Background(), &runtimeapi.ImageFilter{Image: spec(tt.image)})
			require.NoError(t, err)
			if tt.wantID == "" {
				assert.Nil(t, got)
				assert.Empty(t, list)
				return
			}
			require.NotNil(t, got)
			assert.Equal(t, tt.wantID, got.Id)
			assert.Equal(t, []string{reg.ref("team-a/app:v1")}, got.RepoTags)
			assert.Equal(t, tt.wantID, got.Spec.GetImage())
			assert.Positive(t, got.Size)
			require.Len(t, list, 1)
			assert.Equal(t, tt.wantID, list[0].Id)
		})
	}

	all, err := e.ListImages(context.Background(), nil)
	require.NoError(t, err)
	assert.Len(t, all, 2)

	_, err = e.ImageStatus(context.Background(), spec("Not/Valid"), false)
	assert.ErrorIs(t, err, criruntime.ErrInvalidReference)

	verbose, err := e.ImageStatus(context.Background(), spec(app.Id), true)
	require.NoError(t, err)
	assert.Contains(t, verbose.Info["info"], app.Id)
}

func TestImageSurvivesRestart(t *testing.T) {
	reg, dir, e := storeWithTwoImages(t)
	before, err := e.ListImages(context.Background(), nil)
	require.NoError(t, err)
	used := usedBytes(t, e)
	require.NoError(t, e.Close(context.Background()))

	reopened := newEmbedded(t, dir)
	after, err := reopened.ListImages(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, after, len(before))
	for i := range before {
		assert.Equal(t, before[i].Id, after[i].Id)
		assert.Equal(t, before[i].RepoTags, after[i].RepoTags)
		assert.Equal(t, before[i].RepoDigests, after[i].RepoDigests)
		assert.Equal(t, before[i].Size, after[i].Size)
	}
	assert.Equal(t, used, usedBytes(t, reopened))

	reg.reset()
	_, err = reopened.PullImage(context.Background(), spec(reg.ref("team-a/app:v1")), basic("alice", "alice-pw"), nil)
	require.NoError(t, err)
	assert.Equal(t, 1, reg.count(kindManifest))
	assert.Zero(t, reg.count(kindBlob))
}

func TestRemoveImage(t *testing.T) {
	tests := []struct {
		name  string
		image func(app *runtimeapi.Image) string
	}{
		{name: "by tag", image: func(app *runtimeapi.Image) string { return app.RepoTags[0] }},
		{name: "by repo digest", image: func(app *runtimeapi.Image) string { return app.RepoDigests[0] }},
		{name: "by image ID", image: func(app *runtimeapi.Image) string { return app.Id }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg, dir, e := storeWithTwoImages(t)
			app := status(t, e, reg.ref("team-a/app:v1"))
			require.NotNil(t, app)
			tool := status(t, e, reg.ref("public/tool:v1"))
			require.NotNil(t, tool)

			require.NoError(t, e.RemoveImage(context.Background(), spec(tt.image(app))))

			for _, n := range append(criruntime.ImageNames(app), app.Id) {
				assert.Nil(t, status(t, e, n), n)
			}
			assert.NotNil(t, status(t, e, reg.ref("public/tool:v1")), "other images stay")
			assert.Equal(t, tool.Size, usedBytes(t, e), "only the remaining image's blobs are left")
			e = reopen(t, e, dir)
			assert.Nil(t, status(t, e, app.Id), "the removal is durable")

			require.NoError(t, e.RemoveImage(context.Background(), spec(app.Id)), "removing an absent image is not an error")
		})
	}
}

func TestSameDigestInTwoRepositories(t *testing.T) {
	// kubernetes/kubernetes#138175: one image ID, two repository names.
	reg := newTestRegistry(t)
	reg.addUser("alice", "alice-pw")
	reg.allow("team-a/base", "alice")
	reg.makePublic("public/base")
	img := randomImage(t, 2)
	reg.push(reg.ref("team-a/base:v1"), img)
	reg.push(reg.ref("public/base:v1"), img)
	e := newEmbedded(t, t.TempDir())

	idA, err := e.PullImage(context.Background(), spec(reg.ref("team-a/base:v1")), basic("alice", "alice-pw"), nil)
	require.NoError(t, err)
	reg.reset()
	idP, err := e.PullImage(context.Background(), spec(reg.ref("public/base:v1")), nil, nil)
	require.NoError(t, err)

	assert.Equal(t, idA, idP)
	assert.Equal(t, 1, reg.count(kindManifest), "the second name costs one manifest request")
	assert.Zero(t, reg.count(kindBlob))
	got := status(t, e, idA)
	require.NotNil(t, got)
	assert.Equal(t, []string{reg.ref("public/base:v1"), reg.ref("team-a/base:v1")}, got.RepoTags)
	d := manifestDigest(t, img)
	assert.Equal(t, []string{reg.ref("public/base@" + d), reg.ref("team-a/base@" + d)}, got.RepoDigests)

	reg.reset()
	_, err = e.PullImage(context.Background(), spec(reg.ref("team-a/base:v1")), nil, nil)
	assert.ErrorIs(t, err, criruntime.ErrUnauthorized, "the public name does not open the private one")
}

func TestLoadPreloadsWithoutTheRegistry(t *testing.T) {
	reg := newTestRegistry(t)
	reg.addUser("alice", "alice-pw")
	reg.allow("team-a/app", "alice")
	img := randomImage(t, 2)
	reg.push(reg.ref("team-a/app:v1"), img)
	e := newEmbedded(t, t.TempDir())

	id, err := e.Load(context.Background(), reg.ref("team-a/app:v1"), img)
	require.NoError(t, err)
	assert.Equal(t, configDigest(t, img), id)
	assert.Empty(t, reg.requests(), "loading contacts no registry")
	got := status(t, e, "team-a/app:v1")
	assert.Nil(t, got, "names are normalized: team-a/app is on docker.io")
	got = status(t, e, reg.ref("team-a/app:v1"))
	require.NotNil(t, got)
	assert.Equal(t, []string{reg.ref("team-a/app@" + manifestDigest(t, img))}, got.RepoDigests)

	_, err = e.PullImage(context.Background(), spec(reg.ref("team-a/app:v1")), basic("alice", "wrong-pw"), nil)
	assert.ErrorIs(t, err, criruntime.ErrUnauthorized, "a present image is still verified by the registry")
	assert.Zero(t, reg.count(kindBlob))

	id2, err := e.Load(context.Background(), "alpine@"+manifestDigest(t, img), img)
	require.NoError(t, err)
	assert.Equal(t, id, id2)
	assert.NotNil(t, status(t, e, "docker.io/library/alpine@"+manifestDigest(t, img)))

	_, err = e.Load(context.Background(), "alpine@sha256:"+zeros, img)
	assert.ErrorIs(t, err, criruntime.ErrDigestMismatch)
}

func TestNewEmbeddedState(t *testing.T) {
	t.Run("image with a missing blob is dropped", func(t *testing.T) {
		dir := t.TempDir()
		e := newEmbedded(t, dir)
		img := randomImage(t, 1)
		_, err := e.Load(context.Background(), "example.com/a/b:v1", img)
		require.NoError(t, err)
		layers, err := img.Layers()
		require.NoError(t, err)
		d, err := layers[0].Digest()
		require.NoError(t, err)
		require.NoError(t, os.Remove(filepath.Join(dir, "content", "blobs", "sha256", d.Hex)))

		reopened := reopen(t, e, dir)
		assert.Nil(t, status(t, reopened, "example.com/a/b:v1"))
		assert.Zero(t, usedBytes(t, reopened), "the orphaned blobs are collected")
	})
	t.Run("no directory", func(t *testing.T) {
		_, err := criruntime.NewEmbedded("")
		assert.Error(t, err)
	})
}

func TestImageFsInfo(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0))
	dir := t.TempDir()
	e := newEmbedded(t, dir, criruntime.WithClock(clock))
	img := randomImage(t, 2)
	_, err := e.Load(context.Background(), "example.com/a/b:v1", img)
	require.NoError(t, err)

	fs, err := e.ImageFsInfo(context.Background())
	require.NoError(t, err)
	require.Len(t, fs.ImageFilesystems, 1)
	got := fs.ImageFilesystems[0]
	assert.Equal(t, clock.Now().UnixNano(), got.Timestamp)
	assert.Equal(t, filepath.Join(dir, "content"), got.FsId.Mountpoint)
	assert.Equal(t, uint64(4), got.InodesUsed.Value, "manifest, config and two layers")
	assert.Equal(t, status(t, e, "example.com/a/b:v1").Size, got.UsedBytes.Value)
}
