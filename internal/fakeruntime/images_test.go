package fakeruntime_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/fakeruntime"
)

const (
	idA    = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	idB    = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	digest = "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
)

// TestImagesAsContainerdKeepsThem: an image is found by its ID and by
// every spelling of each of its names, a name given to another image
// moves there, a removal by any name removes the whole image, an absent
// image's removal is no error, and an image a call returned is never
// changed under its caller.
func TestImagesAsContainerdKeepsThem(t *testing.T) {
	ctx := context.Background()
	var s fakeruntime.Images
	s.Add(&runtimeapi.Image{Id: idA, RepoTags: []string{"alpine:3.19"}, RepoDigests: []string{"alpine@" + digest}})
	s.Add(&runtimeapi.Image{Id: idB, RepoTags: []string{"registry.example/team-a/app:v1"}})

	for _, name := range []string{idA, "alpine:3.19", "docker.io/library/alpine:3.19", "index.docker.io/library/alpine:3.19", "docker.io/library/alpine@" + digest, "alpine:3.19@" + digest} {
		assert.Equal(t, idA, s.Find(name).GetId(), "%q", name)
	}
	for _, name := range []string{"alpine", "alpine:3.20", "registry.example/alpine:3.19", "alpine@sha256:" + strings.Repeat("e", 64)} {
		assert.Nil(t, s.Find(name), "%q", name)
	}

	before := s.Find("alpine:3.19")
	require.True(t, s.Name(idB, "docker.io/library/alpine:3.19"), "the tag moves")
	assert.Equal(t, idB, s.Find("alpine:3.19").GetId())
	assert.Equal(t, []string{"alpine:3.19"}, before.GetRepoTags(), "a returned image is not changed")
	assert.Empty(t, s.Find(idA).GetRepoTags(), "the tag left the other image")
	assert.False(t, s.Name("sha256:"+strings.Repeat("c", 64), "x:1"), "no image of that ID")

	require.NoError(t, s.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: "registry.example/team-a/app:v1"}))
	assert.Nil(t, s.Find(idB), "the whole image went")
	assert.Nil(t, s.Find("alpine:3.19"), "with all its names")
	require.NoError(t, s.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: idB}), "an absent image: no error")
	list, err := s.ListImages(ctx, nil)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, idA, list[0].GetId())
}

// TestRuntimePullsFromItsRegistry: a pull asks the model registry, for an
// image the runtime holds too; it is refused as containerd reports a 401
// to a user who may not read the repository, and a name the registry
// does not serve is not found; a pull stores the image under the name
// pulled, with the runtime's repo digests; Hold's error ends the pull
// after the image was stored with StoreFirst.
func TestRuntimePullsFromItsRegistry(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		image      string
		user       string
		password   string
		hold       error
		storeFirst bool
		wantErr    string
		wantStored bool
	}{
		{name: "a reader", image: "registry.example/team-a/app:v1", user: "alice", password: "pw", wantStored: true},
		{name: "another spelling of a public image, anonymous", image: "tool", wantStored: true},
		{name: "a user who may not read it", image: "registry.example/team-a/app:v1", user: "bob", password: "pw", wantErr: "pulling from host registry.example failed with status code [manifests v1]: 401 Unauthorized"},
		{name: "a reader with the wrong password", image: "registry.example/team-a/app:v1", user: "alice", password: "no", wantErr: "401 Unauthorized"},
		{name: "a name not served", image: "registry.example/team-a/app:v2", user: "alice", password: "pw", wantErr: "not found"},
		{name: "held, then failed", image: "registry.example/team-a/app:v1", user: "alice", password: "pw", hold: context.Canceled, wantErr: "failed to pull and unpack image \"registry.example/team-a/app:v1\": context canceled"},
		{name: "stored, then failed", image: "registry.example/team-a/app:v1", user: "alice", password: "pw", hold: context.Canceled, storeFirst: true, wantErr: "context canceled", wantStored: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &fakeruntime.Runtime{RepoDigests: []string{"registry.example/team-a/app@" + digest}, StoreFirst: tc.storeFirst}
			rt.AddUser("alice", "pw")
			rt.AddUser("bob", "pw")
			rt.Serve("registry.example/team-a/app:v1", idA, "alice")
			rt.Serve("docker.io/library/tool:latest", idB)
			if tc.hold != nil {
				rt.Hold = func(context.Context, *runtimeapi.ImageSpec, *runtimeapi.AuthConfig) error { return tc.hold }
			}
			var auth *runtimeapi.AuthConfig
			if tc.user != "" {
				auth = &runtimeapi.AuthConfig{Username: tc.user, Password: tc.password}
			}
			id, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: tc.image}, auth, nil)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				assert.Empty(t, id)
			} else {
				require.NoError(t, err)
				assert.NotEmpty(t, id)
			}
			assert.Equal(t, []fakeruntime.Pull{{Image: tc.image, User: tc.user}}, rt.Pulls())
			img := rt.Find(tc.image)
			assert.Equal(t, tc.wantStored, img != nil, "stored under the name pulled")
			if tc.wantStored && tc.image != "tool" {
				assert.Contains(t, img.GetRepoDigests(), "registry.example/team-a/app@"+digest)
			}
		})
	}
}
