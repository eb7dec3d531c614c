package registry_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/registry"
)

func TestCountsRequestsByKind(t *testing.T) {
	r := newRegistry(t, fixture())
	imgs := seeded(t, r)
	ref, err := name.ParseReference(imgs["team-a/app"].Reference, name.Insecure)
	require.NoError(t, err)
	ping := registry.Filter{Kind: registry.KindBase, Status: http.StatusUnauthorized, Anonymous: true}

	tests := []struct {
		name string
		do   func(t *testing.T)
		want map[registry.Filter]int
	}{
		{
			name: "remote.Head is a challenged ping and one manifest HEAD",
			do: func(t *testing.T) {
				_, err := remote.Head(ref, remote.WithAuth(basic(alice)))
				require.NoError(t, err)
			},
			want: map[registry.Filter]int{
				{}:   2,
				ping: 1,
				{Kind: registry.KindManifest, Method: http.MethodHead, Repository: "team-a/app", Reference: "v1", Status: http.StatusOK, User: alice}: 1,
				{Kind: registry.KindBlob}: 0,
			},
		},
		{
			name: "remote.Get fetches the manifest once",
			do: func(t *testing.T) {
				_, err := remote.Get(ref, remote.WithAuth(basic(alice)))
				require.NoError(t, err)
			},
			want: map[registry.Filter]int{
				{}:   2,
				ping: 1,
				{Kind: registry.KindManifest, Method: http.MethodGet, Status: http.StatusOK, User: alice}: 1,
				{Kind: registry.KindBlob}: 0,
			},
		},
		{
			name: "reading the image reads the config and every layer",
			do: func(t *testing.T) {
				img, err := remote.Image(ref, remote.WithAuth(basic(alice)))
				require.NoError(t, err)
				_, err = img.ConfigFile()
				require.NoError(t, err)
				layers, err := img.Layers()
				require.NoError(t, err)
				for _, l := range layers {
					rc, err := l.Compressed()
					require.NoError(t, err)
					_, err = io.Copy(io.Discard, rc)
					require.NoError(t, err)
					require.NoError(t, rc.Close())
				}
			},
			want: map[registry.Filter]int{
				{Kind: registry.KindManifest, Method: http.MethodGet, Status: http.StatusOK}:          1,
				{Kind: registry.KindBlob, Method: http.MethodGet, Status: http.StatusOK, User: alice}: 3,
				{Kind: registry.KindBlob, Reference: imgs["team-a/app"].ConfigDigest}:                 1,
				{Kind: registry.KindBlob, Reference: imgs["team-a/app"].Layers[1]}:                    1,
			},
		},
		{
			name: "a refused pull ends at the 401",
			do: func(t *testing.T) {
				_, err := remote.Head(ref, remote.WithAuth(basic(bob)))
				require.Error(t, err)
			},
			want: map[registry.Filter]int{
				{}:   2,
				ping: 1,
				{Kind: registry.KindManifest, Status: http.StatusUnauthorized, User: bob}: 1,
				{Kind: registry.KindBlob}: 0,
			},
		},
		{
			name: "tag list and catalog",
			do: func(t *testing.T) {
				_, err := remote.List(ref.Context(), remote.WithAuth(basic(alice)))
				require.NoError(t, err)
				_, err = remote.Catalog(t.Context(), ref.Context().Registry, remote.WithAuth(basic(alice)))
				require.NoError(t, err)
			},
			want: map[registry.Filter]int{
				ping: 2,
				{Kind: registry.KindTags, Repository: "team-a/app", Status: http.StatusOK}: 1,
				{Kind: registry.KindCatalog, Status: http.StatusOK, User: alice}:           1,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.Reset()
			tt.do(t)
			for f, want := range tt.want {
				assert.Equal(t, want, r.Count(f), "filter %+v", f)
			}
		})
	}
}

func TestRequestClassification(t *testing.T) {
	r := newRegistry(t, fixture())
	imgs := seeded(t, r)
	d := imgs["team-a/app"].Digest
	tests := []struct {
		method, path string
		kind         registry.Kind
		repo, ref    string
	}{
		{method: http.MethodGet, path: "/v2/", kind: registry.KindBase},
		{method: http.MethodGet, path: "/v2/_catalog", kind: registry.KindCatalog},
		{method: http.MethodHead, path: "/v2/team-a/app/manifests/v1", kind: registry.KindManifest, repo: "team-a/app", ref: "v1"},
		{method: http.MethodGet, path: "/v2/team-a/app/manifests/" + d, kind: registry.KindManifest, repo: "team-a/app", ref: d},
		{method: http.MethodGet, path: "/v2/a/b/c/blobs/" + d, kind: registry.KindBlob, repo: "a/b/c", ref: d},
		{method: http.MethodPost, path: "/v2/team-a/app/blobs/uploads/", kind: registry.KindUpload, repo: "team-a/app"},
		{method: http.MethodPatch, path: "/v2/team-a/app/blobs/uploads/1234", kind: registry.KindUpload, repo: "team-a/app", ref: "1234"},
		{method: http.MethodGet, path: "/v2/team-a/app/tags/list", kind: registry.KindTags, repo: "team-a/app"},
		{method: http.MethodGet, path: "/v2/team-a/app/referrers/" + d, kind: registry.KindOther},
		{method: http.MethodGet, path: "/v2/team-a/_catalog", kind: registry.KindOther},
		{method: http.MethodGet, path: "/healthz", kind: registry.KindOther},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r.Reset()
			call(t, r, tt.method, tt.path, pusher, "")
			reqs := r.Requests()
			require.Len(t, reqs, 1)
			got := reqs[0]
			assert.Equal(t, tt.kind, got.Kind)
			assert.Equal(t, tt.repo, got.Repository)
			assert.Equal(t, tt.ref, got.Reference)
			assert.Equal(t, tt.method, got.Method)
			assert.Equal(t, tt.path, got.Path)
			assert.Equal(t, pusher, got.User)
		})
	}
}

func TestUnknownAPIPathsAreNotForwarded(t *testing.T) {
	r := newRegistry(t, fixture())
	seeded(t, r)
	// go-containerregistry would answer any path ending in _catalog with
	// the whole catalog; the middleware answers unknown paths itself.
	res := call(t, r, http.MethodGet, "/v2/team-a/_catalog", bob, "")
	assert.Equal(t, http.StatusNotFound, res.status)
	assert.Equal(t, []string{registry.CodeUnknown}, res.codes)
}

func TestAccessLog(t *testing.T) {
	var buf bytes.Buffer
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 15, 4, 5, 6, time.UTC))
	r := newRegistry(t, fixture(), registry.WithAccessLog(&buf), registry.WithClock(clk))

	call(t, r, http.MethodHead, "/v2/team-a/app/manifests/v1", alice, "")
	call(t, r, http.MethodGet, "/v2/team-a/app/manifests/v1", alice, "wrong password")
	call(t, r, http.MethodGet, "/v2/", "", "")

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 3)
	assert.Equal(t, `time=2026-01-02T15:04:05.000000006Z method=HEAD path="/v2/team-a/app/manifests/v1" kind=manifest repo=team-a/app ref=v1 status=404 bytes=0 user=alice claimed=alice duration=0s`, lines[0])
	assert.Contains(t, lines[1], "status=401")
	assert.Contains(t, lines[1], "user=- claimed=alice")
	assert.Equal(t, `time=2026-01-02T15:04:05.000000006Z method=GET path="/v2/" kind=base repo=- ref=- status=401 bytes=73 user=- claimed=- duration=0s`, lines[2])
	for _, u := range []string{alice, bob, carol, writer, pusher} {
		assert.NotContains(t, buf.String(), password(u), "the access log holds a password")
	}
	assert.NotContains(t, buf.String(), "wrong password")
}

func TestKlogLineNamesTheUserNotThePassword(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 2})
	r := newRegistry(t, fixture(), registry.WithLogger(logger))

	call(t, r, http.MethodGet, "/v2/", alice, "")
	call(t, r, http.MethodGet, "/v2/", bob, "wrong password")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], `"msg"="Registry request"`)
	assert.Contains(t, lines[0], `"user"="alice"`)
	assert.Contains(t, lines[1], `"user"=""`)
	assert.Contains(t, lines[1], `"claimedUser"="bob"`)
	assert.Contains(t, lines[1], `"status"=401`)
	for _, l := range lines {
		assert.NotContains(t, l, password(alice), "a klog line holds a password")
		assert.NotContains(t, l, "wrong password", "a klog line holds a password")
	}
}

func TestFormatAccessLogLine(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("X", 3600))
	tests := []struct {
		name string
		req  registry.Request
		want string
	}{
		{
			name: "blob read",
			req:  registry.Request{Time: at, Duration: 1500 * time.Microsecond, Method: "GET", Path: "/v2/a/blobs/sha256:ab", Kind: registry.KindBlob, Repository: "a", Reference: "sha256:ab", Status: 200, Bytes: 42, User: "u", Claimed: "u"},
			want: `time=2026-03-04T04:06:07Z method=GET path="/v2/a/blobs/sha256:ab" kind=blob repo=a ref=sha256:ab status=200 bytes=42 user=u claimed=u duration=1.5ms` + "\n",
		},
		{
			name: "odd claimed name is quoted",
			req:  registry.Request{Time: at, Method: "GET", Path: "/v2/\"x y\"", Kind: registry.KindOther, Status: 401, Claimed: "a b=c"},
			want: `time=2026-03-04T04:06:07Z method=GET path="/v2/\"x y\"" kind=other repo=- ref=- status=401 bytes=0 user=- claimed="a b=c" duration=0s` + "\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, registry.FormatAccessLogLine(tt.req))
		})
	}
}

func TestRequestLogKeepsTheMostRecent(t *testing.T) {
	r := newRegistry(t, fixture(), registry.WithRequestLogSize(3))
	for _, p := range []string{"/v2/a", "/v2/b", "/v2/c", "/v2/d", "/v2/e"} {
		call(t, r, http.MethodGet, p, pusher, "")
	}
	var paths []string
	for _, req := range r.Requests() {
		paths = append(paths, req.Path)
	}
	assert.Equal(t, []string{"/v2/c", "/v2/d", "/v2/e"}, paths)
	assert.Equal(t, 2, r.Dropped())
	r.Reset()
	assert.Empty(t, r.Requests())
	assert.Zero(t, r.Dropped())
}

func TestConcurrentClients(t *testing.T) {
	r := newRegistry(t, fixture())
	imgs := seeded(t, r)
	users := []string{alice, bob, carol, writer, pusher, ""}
	const perUser = 20
	var wg sync.WaitGroup
	for _, u := range users {
		for range perUser {
			wg.Go(func() {
				res := call(t, r, http.MethodHead, "/v2/team-a/app/manifests/"+imgs["team-a/app"].Digest, u, "")
				assert.Contains(t, []int{http.StatusOK, http.StatusUnauthorized}, res.status)
				_ = r.Count(registry.Filter{User: u})
				_ = r.Requests()
			})
		}
	}
	wg.Wait()
	assert.Equal(t, len(users)*perUser, r.Count(registry.Filter{}))
	for _, u := range []string{alice, writer, pusher} {
		assert.Equal(t, perUser, r.Count(registry.Filter{User: u, Status: http.StatusOK}), u)
	}
	for _, u := range []string{bob, carol} {
		assert.Equal(t, perUser, r.Count(registry.Filter{User: u, Status: http.StatusUnauthorized}), u)
	}
	assert.Equal(t, perUser, r.Count(registry.Filter{Anonymous: true}))
}
