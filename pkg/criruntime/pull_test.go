package criruntime_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

func TestPullImage(t *testing.T) {
	reg := newTestRegistry(t)
	reg.addUser("alice", "alice-pw")
	reg.addUser("bob", "bob-pw")
	reg.addToken("alice-token", "alice")
	reg.allow("team-a/app", "alice")
	reg.makePublic("public/tool")
	private, public := randomImage(t, 2), randomImage(t, 1)
	reg.push(reg.ref("team-a/app:v1"), private)
	reg.push(reg.ref("public/tool:v1"), public)

	tests := []struct {
		name       string
		image      string
		auth       *runtimeapi.AuthConfig
		wantID     string
		wantStatus int
	}{
		{name: "private with username and password", image: "team-a/app:v1", auth: basic("alice", "alice-pw"), wantID: configDigest(t, private)},
		{name: "private with auth field", image: "team-a/app:v1",
			auth:   &runtimeapi.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("alice:alice-pw"))},
			wantID: configDigest(t, private)},
		{name: "private with registry token", image: "team-a/app:v1", auth: &runtimeapi.AuthConfig{RegistryToken: "alice-token"}, wantID: configDigest(t, private)},
		{name: "public anonymous", image: "public/tool:v1", wantID: configDigest(t, public)},
		{name: "public with empty auth config", image: "public/tool:v1", auth: &runtimeapi.AuthConfig{}, wantID: configDigest(t, public)},
		{name: "private anonymous", image: "team-a/app:v1", wantStatus: http.StatusUnauthorized},
		{name: "private wrong password", image: "team-a/app:v1", auth: basic("alice", "nope-nope"), wantStatus: http.StatusUnauthorized},
		{name: "private other user", image: "team-a/app:v1", auth: basic("bob", "bob-pw"), wantStatus: http.StatusUnauthorized},
		{name: "unknown tag", image: "public/tool:v9", wantStatus: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEmbedded(t, t.TempDir())
			reg.reset()
			ref := reg.ref(tt.image)

			id, err := e.PullImage(context.Background(), spec(ref), tt.auth, nil)

			if tt.wantStatus != 0 {
				require.Error(t, err)
				assert.Equal(t, tt.wantStatus, criruntime.StatusCode(err))
				assert.Contains(t, err.Error(), http.StatusText(tt.wantStatus))
				assert.Contains(t, err.Error(), ref)
				if tt.wantStatus == http.StatusUnauthorized {
					assert.ErrorIs(t, err, criruntime.ErrUnauthorized)
					assert.Contains(t, err.Error(), "401 Unauthorized")
				}
				assert.Zero(t, reg.count(kindBlob), "no blob is fetched after a refusal")
				assert.Nil(t, status(t, e, ref))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantID, id)
			img := status(t, e, ref)
			require.NotNil(t, img)
			assert.Equal(t, tt.wantID, img.Id)
			assert.Equal(t, []string{ref}, img.RepoTags)
			assert.Len(t, img.RepoDigests, 1)
			assert.Positive(t, reg.count(kindBlob), "a first pull downloads the config and layers")
		})
	}
}

func TestRePullOfPresentImageFetchesOnlyTheManifest(t *testing.T) {
	reg := newTestRegistry(t)
	reg.addUser("alice", "alice-pw")
	reg.addUser("carol", "carol-pw")
	reg.allow("team-a/app", "alice", "carol")
	img := randomImage(t, 3)
	reg.push(reg.ref("team-a/app:v1"), img)
	ref := reg.ref("team-a/app:v1")
	e := newEmbedded(t, t.TempDir())
	_, err := e.PullImage(context.Background(), spec(ref), basic("alice", "alice-pw"), nil)
	require.NoError(t, err)

	tests := []struct {
		name       string
		auth       *runtimeapi.AuthConfig
		wantErr    bool
		wantRounds []request
	}{
		{
			name: "same credentials",
			auth: basic("alice", "alice-pw"),
			wantRounds: []request{
				{Method: http.MethodGet, Kind: kindPing, Status: http.StatusUnauthorized},
				{Method: http.MethodGet, Kind: kindManifest, Repo: "team-a/app", Status: http.StatusOK},
			},
		},
		{
			name: "other valid credentials",
			auth: basic("carol", "carol-pw"),
			wantRounds: []request{
				{Method: http.MethodGet, Kind: kindPing, Status: http.StatusUnauthorized},
				{Method: http.MethodGet, Kind: kindManifest, Repo: "team-a/app", Status: http.StatusOK},
			},
		},
		{
			name:    "wrong password",
			auth:    basic("alice", "wrong-pw"),
			wantErr: true,
			wantRounds: []request{
				{Method: http.MethodGet, Kind: kindPing, Status: http.StatusUnauthorized},
				{Method: http.MethodGet, Kind: kindManifest, Repo: "team-a/app", Status: http.StatusUnauthorized},
			},
		},
		{
			name:    "no credentials",
			wantErr: true,
			wantRounds: []request{
				{Method: http.MethodGet, Kind: kindPing, Status: http.StatusUnauthorized},
				{Method: http.MethodGet, Kind: kindManifest, Repo: "team-a/app", Status: http.StatusUnauthorized},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg.reset()
			id, err := e.PullImage(context.Background(), spec(ref), tt.auth, nil)
			if tt.wantErr {
				require.Error(t, err)
				assert.ErrorIs(t, err, criruntime.ErrUnauthorized)
				assert.Contains(t, err.Error(), "401 Unauthorized")
				assert.NotContains(t, err.Error(), "wrong-pw")
			} else {
				require.NoError(t, err)
				assert.Equal(t, configDigest(t, img), id)
			}
			assert.Equal(t, tt.wantRounds, reg.requests())
			assert.Zero(t, reg.count(kindBlob))
			assert.NotNil(t, status(t, e, ref), "the image stays present either way")
		})
	}
}

func TestPullByDigest(t *testing.T) {
	reg := newTestRegistry(t)
	reg.makePublic("public/tool")
	img := randomImage(t, 1)
	reg.push(reg.ref("public/tool:v1"), img)
	ref := reg.ref("public/tool@" + manifestDigest(t, img))
	e := newEmbedded(t, t.TempDir())

	id, err := e.PullImage(context.Background(), spec(ref), nil, nil)
	require.NoError(t, err)

	got := status(t, e, ref)
	require.NotNil(t, got)
	assert.Equal(t, id, got.Id)
	assert.Empty(t, got.RepoTags, "a pull by digest records no tag")
	assert.Equal(t, []string{ref}, got.RepoDigests)
}

func TestPullMultiPlatformIndexChoosesThePlatform(t *testing.T) {
	reg := newTestRegistry(t)
	reg.makePublic("public/multi")
	idx, images := platformIndex(t)
	reg.pushIndex(reg.ref("public/multi:v1"), idx)
	ref := reg.ref("public/multi:v1")
	e := newEmbedded(t, t.TempDir(), criruntime.WithPlatform(linuxArm64))

	id, err := e.PullImage(context.Background(), spec(ref), nil, nil)
	require.NoError(t, err)

	arm := images[linuxArm64.String()]
	assert.Equal(t, configDigest(t, arm), id)
	layers, err := arm.Layers()
	require.NoError(t, err)
	assert.Equal(t, len(layers)+1, reg.count(kindBlob), "only the chosen platform's config and layers")
	got := status(t, e, ref)
	require.NotNil(t, got)
	assert.Equal(t, []string{reg.ref("public/multi@" + manifestDigest(t, idx))}, got.RepoDigests, "RepoDigests name the index, as in containerd")

	t.Run("no matching platform", func(t *testing.T) {
		e := newEmbedded(t, t.TempDir(), criruntime.WithPlatform(windowsAmd64))
		_, err := e.PullImage(context.Background(), spec(ref), nil, nil)
		assert.ErrorIs(t, err, criruntime.ErrNoMatchingPlatform)
	})
}

func TestPullWhenPingIsOpenAnswersTheRepositoryChallenge(t *testing.T) {
	reg := newTestRegistry(t)
	reg.set(func(r *testRegistry) { r.openPing = true })
	reg.addUser("alice", "alice-pw")
	reg.allow("team-a/app", "alice")
	img := randomImage(t, 1)
	reg.push(reg.ref("team-a/app:v1"), img)
	e := newEmbedded(t, t.TempDir())

	id, err := e.PullImage(context.Background(), spec(reg.ref("team-a/app:v1")), basic("alice", "alice-pw"), nil)
	require.NoError(t, err)
	assert.Equal(t, configDigest(t, img), id)

	reg.reset()
	_, err = e.PullImage(context.Background(), spec(reg.ref("team-a/app:v1")), basic("alice", "bad-pw"), nil)
	require.ErrorIs(t, err, criruntime.ErrUnauthorized)
	assert.Zero(t, reg.count(kindBlob))
}

func TestPullNeedsNoHeadSupport(t *testing.T) {
	reg := newTestRegistry(t)
	reg.makePublic("public/tool")
	img := randomImage(t, 1)
	reg.push(reg.ref("public/tool:v1"), img)
	reg.set(func(r *testRegistry) { r.noHead = true })
	e := newEmbedded(t, t.TempDir())

	for range 2 {
		id, err := e.PullImage(context.Background(), spec(reg.ref("public/tool:v1")), nil, nil)
		require.NoError(t, err)
		assert.Equal(t, configDigest(t, img), id)
	}
}

func TestPullCancellation(t *testing.T) {
	reg := newTestRegistry(t)
	reg.makePublic("public/tool")
	reg.push(reg.ref("public/tool:v1"), randomImage(t, 2))
	ref := reg.ref("public/tool:v1")

	t.Run("canceled before", func(t *testing.T) {
		e := newEmbedded(t, t.TempDir())
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := e.PullImage(ctx, spec(ref), nil, nil)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Nil(t, status(t, e, ref))
	})
	t.Run("canceled during a blob download", func(t *testing.T) {
		dir := t.TempDir()
		e := newEmbedded(t, dir)
		started := make(chan struct{})
		reg.set(func(r *testRegistry) { r.blockBlobs = started })
		t.Cleanup(func() { reg.set(func(r *testRegistry) { r.blockBlobs = nil }) })
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := e.PullImage(ctx, spec(ref), nil, nil)
			errc <- err
		}()
		<-started
		cancel()
		err := <-errc
		assert.ErrorIs(t, err, context.Canceled)
		assert.Nil(t, status(t, e, ref))
		assert.Zero(t, usedBytes(t, reopen(t, e, dir)), "a reopened store keeps nothing of a canceled pull")
	})
}

func TestConcurrentPullsOfTheSameImage(t *testing.T) {
	reg := newTestRegistry(t)
	reg.makePublic("public/tool")
	img := randomImage(t, 3)
	reg.push(reg.ref("public/tool:v1"), img)
	reg.push(reg.ref("public/tool:v2"), img)
	dir := t.TempDir()
	e := newEmbedded(t, dir)

	var wg sync.WaitGroup
	ids := make([]string, 16)
	errs := make([]error, 16)
	for i := range ids {
		wg.Go(func() {
			tag := []string{"v1", "v2"}[i%2]
			ids[i], errs[i] = e.PullImage(context.Background(), spec(reg.ref("public/tool:"+tag)), nil, nil)
		})
	}
	wg.Wait()
	for i := range ids {
		require.NoError(t, errs[i])
		assert.Equal(t, configDigest(t, img), ids[i])
	}
	images, err := e.ListImages(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, images, 1)
	assert.Equal(t, []string{reg.ref("public/tool:v1"), reg.ref("public/tool:v2")}, images[0].RepoTags)

	reopened := reopen(t, e, dir)
	reg.reset()
	_, err = reopened.PullImage(context.Background(), spec(reg.ref("public/tool:v1")), nil, nil)
	require.NoError(t, err)
	assert.Zero(t, reg.count(kindBlob), "the store is complete after concurrent pulls")
}

func TestPullRejectsInvalidNames(t *testing.T) {
	e := newEmbedded(t, t.TempDir())
	for _, image := range []string{"", "UPPER/case", "a:b:c", "sha256:" + zeros} {
		_, err := e.PullImage(context.Background(), spec(image), nil, nil)
		assert.ErrorIs(t, err, criruntime.ErrInvalidReference, image)
	}
	_, err := e.PullImage(context.Background(), nil, nil, nil)
	assert.ErrorIs(t, err, criruntime.ErrInvalidReference)
}

func TestConcurrentPullsAndRemovalsKeepTheStoreComplete(t *testing.T) {
	reg := newTestRegistry(t)
	reg.makePublic("public/a")
	reg.makePublic("public/b")
	base := randomImage(t, 2)
	extra, err := random.Layer(256, types.DockerLayer)
	require.NoError(t, err)
	derived, err := mutate.AppendLayers(base, extra)
	require.NoError(t, err)
	reg.push(reg.ref("public/a:v1"), base)
	reg.push(reg.ref("public/b:v1"), derived) // shares base's layers
	dir := t.TempDir()
	e := newEmbedded(t, dir)
	ctx := context.Background()

	var wg sync.WaitGroup
	for _, repo := range []string{"public/a:v1", "public/b:v1"} {
		ref := reg.ref(repo)
		wg.Go(func() {
			for range 5 {
				_, err := e.PullImage(ctx, spec(ref), nil, nil)
				assert.NoError(t, err)
			}
		})
		wg.Go(func() {
			for range 5 {
				assert.NoError(t, e.RemoveImage(ctx, spec(ref)))
			}
		})
	}
	wg.Wait()

	reopened := reopen(t, e, dir)
	images, err := reopened.ListImages(ctx, nil)
	require.NoError(t, err)
	reg.reset()
	for _, img := range images {
		_, err := reopened.PullImage(ctx, spec(img.RepoTags[0]), nil, nil)
		require.NoError(t, err)
	}
	assert.Zero(t, reg.count(kindBlob), "every listed image still has all its blobs")
}
