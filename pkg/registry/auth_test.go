package registry_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/registry"
)

func TestChallengeOnEveryProtectedPath(t *testing.T) {
	r := newRegistry(t, fixture())
	imgs := seeded(t, r)
	layer := imgs["team-a/app"].Layers[0]
	publicLayer := imgs["public/base"].Layers[0]

	paths := []struct {
		name          string
		method, path  string
		publicForAnon bool // anonymous may read it
	}{
		{name: "base", method: http.MethodGet, path: "/v2/"},
		{name: "base without slash", method: http.MethodGet, path: "/v2"},
		{name: "catalog", method: http.MethodGet, path: "/v2/_catalog"},
		{name: "private manifest head", method: http.MethodHead, path: "/v2/team-a/app/manifests/v1"},
		{name: "private manifest get", method: http.MethodGet, path: "/v2/team-a/app/manifests/v1"},
		{name: "private blob", method: http.MethodGet, path: "/v2/team-a/app/blobs/" + layer},
		{name: "private tags", method: http.MethodGet, path: "/v2/team-a/app/tags/list"},
		{name: "missing repository", method: http.MethodHead, path: "/v2/nobody/here/manifests/v1"},
		{name: "upload start", method: http.MethodPost, path: "/v2/team-a/app/blobs/uploads/"},
		{name: "manifest push", method: http.MethodPut, path: "/v2/public/base/manifests/v2"},
		{name: "manifest delete", method: http.MethodDelete, path: "/v2/public/base/manifests/v1"},
		{name: "unknown API path", method: http.MethodGet, path: "/v2/what/ever"},
		{name: "invalid repository name", method: http.MethodGet, path: "/v2/Team-A/app/manifests/v1"},
		{name: "public manifest", method: http.MethodHead, path: "/v2/public/base/manifests/v1", publicForAnon: true},
		{name: "public blob", method: http.MethodGet, path: "/v2/public/base/blobs/" + publicLayer, publicForAnon: true},
	}
	callers := []struct {
		name, user, pass string
		header           string
	}{
		{name: "anonymous"},
		{name: "wrong password", user: alice, pass: "not-the-password"},
		{name: "unknown user", user: "mallory", pass: "whatever"},
		{name: "bearer token", header: "Bearer abc.def.ghi"},
	}
	for _, p := range paths {
		for _, c := range callers {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				if c.header != "" {
					req, err := http.NewRequest(p.method, r.URL()+p.path, nil)
					require.NoError(t, err)
					req.Header.Set("Authorization", c.header)
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					resp.Body.Close()
					assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
					assert.Equal(t, registry.Challenge, resp.Header.Get("WWW-Authenticate"))
					return
				}
				res := call(t, r, p.method, p.path, c.user, c.pass)
				if p.publicForAnon && c.user == "" {
					assert.Equal(t, http.StatusOK, res.status)
					assert.Empty(t, res.challenge)
					return
				}
				assert.Equal(t, http.StatusUnauthorized, res.status)
				assert.Equal(t, `Basic realm="pullguard"`, res.challenge)
				if p.method != http.MethodHead {
					assert.Equal(t, []string{registry.CodeUnauthorized}, res.codes)
				}
			})
		}
	}
}

func TestReadAccessPerUser(t *testing.T) {
	r := newRegistry(t, fixture())
	imgs := seeded(t, r)
	repos := []string{"public/base", "team-a/app", "team-a/secret", "team-b/app", "shared/app"}
	// can lists, per caller, the repositories it may read.
	tests := []struct {
		user string
		can  []string
	}{
		{user: "", can: []string{"public/base"}},
		{user: alice, can: []string{"public/base", "team-a/app", "shared/app"}},
		{user: bob, can: []string{"public/base", "team-b/app", "shared/app"}},
		{user: carol, can: []string{"public/base", "team-a/secret", "shared/app"}},
		{user: writer, can: []string{"public/base", "team-a/app", "shared/app"}},
		{user: pusher, can: repos},
	}
	for _, tt := range tests {
		for _, repo := range repos {
			name := tt.user
			if name == "" {
				name = "anonymous"
			}
			t.Run(name+"/"+repo, func(t *testing.T) {
				want := http.StatusUnauthorized
				for _, c := range tt.can {
					if c == repo {
						want = http.StatusOK
					}
				}
				for _, path := range []string{
					"/v2/" + repo + "/manifests/v1",
					"/v2/" + repo + "/manifests/" + imgs[repo].Digest,
					"/v2/" + repo + "/blobs/" + imgs[repo].ConfigDigest,
					"/v2/" + repo + "/tags/list",
				} {
					res := call(t, r, http.MethodGet, path, tt.user, "")
					assert.Equal(t, want, res.status, "GET %s", path)
					if want == http.StatusUnauthorized {
						assert.Equal(t, registry.Challenge, res.challenge, "GET %s", path)
						assert.Equal(t, []string{registry.CodeUnauthorized}, res.codes, "GET %s", path)
					}
				}
			})
		}
	}
}

func TestDeniedStatusForbidden(t *testing.T) {
	r := newRegistry(t, fixture(), registry.WithDeniedStatus(http.StatusForbidden))
	seeded(t, r)

	denied := call(t, r, http.MethodGet, "/v2/team-a/app/manifests/v1", bob, "")
	assert.Equal(t, http.StatusForbidden, denied.status)
	assert.Empty(t, denied.challenge)
	assert.Equal(t, []string{registry.CodeDenied}, denied.codes)

	anonymous := call(t, r, http.MethodGet, "/v2/team-a/app/manifests/v1", "", "")
	assert.Equal(t, http.StatusUnauthorized, anonymous.status, "missing credentials still get the challenge")
	wrong := call(t, r, http.MethodGet, "/v2/team-a/app/manifests/v1", bob, "wrong")
	assert.Equal(t, http.StatusUnauthorized, wrong.status, "wrong credentials still get the challenge")
}

func TestPushRules(t *testing.T) {
	r := newRegistry(t, fixture())
	tests := []struct {
		user, repo string
		allowed    bool
	}{
		{user: pusher, repo: "team-a/app", allowed: true},
		{user: pusher, repo: "unruled/repo", allowed: true},
		{user: writer, repo: "team-a/app", allowed: true},
		{user: writer, repo: "team-a/deep/tool", allowed: true},
		{user: writer, repo: "team-a/secret", allowed: false}, // the exact rule wins
		{user: writer, repo: "team-b/app", allowed: false},
		{user: alice, repo: "team-a/app", allowed: false}, // a reader only
		{user: bob, repo: "public/base", allowed: false},
		{user: "", repo: "public/base", allowed: false},
	}
	for i, tt := range tests {
		t.Run(tt.user+"@"+tt.repo, func(t *testing.T) {
			// A new image each time: remote.Write skips a push whose
			// manifest the caller can already read.
			img := mustImage(t, int64(100+i))
			ref, err := name.NewTag(r.Host()+"/"+tt.repo+":pushed", name.Insecure)
			require.NoError(t, err)
			err = remote.Write(ref, img, remote.WithAuth(basic(tt.user)), remote.WithContext(context.Background()))
			if tt.allowed {
				require.NoError(t, err)
				_, err := remote.Head(ref, remote.WithAuth(basic(pusher)))
				assert.NoError(t, err)
				return
			}
			var terr *transport.Error
			require.True(t, errors.As(err, &terr), "want a registry error, got %v", err)
			assert.Equal(t, http.StatusUnauthorized, terr.StatusCode)
		})
	}
}

func TestBlobsAreServedOnlyThroughTheirRepository(t *testing.T) {
	r := newRegistry(t, fixture())
	imgs := seeded(t, r)
	secretLayer := imgs["team-a/secret"].Layers[0]

	// alice may read shared/app but the layer was pushed to team-a/secret.
	res := call(t, r, http.MethodGet, "/v2/shared/app/blobs/"+secretLayer, alice, "")
	assert.Equal(t, http.StatusNotFound, res.status)
	assert.Equal(t, []string{"BLOB_UNKNOWN"}, res.codes)
	res = call(t, r, http.MethodGet, "/v2/team-a/secret/blobs/"+secretLayer, carol, "")
	assert.Equal(t, http.StatusOK, res.status)
}

func TestCatalogListsReadableRepositories(t *testing.T) {
	r := newRegistry(t, fixture())
	seeded(t, r)
	tests := []struct {
		user string
		want []string
	}{
		{user: alice, want: []string{"public/base", "shared/app", "team-a/app"}},
		{user: carol, want: []string{"public/base", "shared/app", "team-a/secret"}},
		{user: pusher, want: []string{"public/base", "shared/app", "team-a/app", "team-a/secret", "team-b/app"}},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			ref, err := name.NewRegistry(r.Host(), name.Insecure)
			require.NoError(t, err)
			got, err := remote.Catalog(context.Background(), ref, remote.WithAuth(basic(tt.user)))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestPasswordHashUser(t *testing.T) {
	hash, err := bcryptHash("s3cret")
	require.NoError(t, err)
	r := newRegistry(t, registry.Config{
		Users:        []registry.User{{Name: "dave", PasswordHash: hash}},
		Repositories: []registry.Repository{{Name: "*", AllUsers: true}},
	})
	assert.Equal(t, http.StatusOK, call(t, r, http.MethodGet, "/v2/", "dave", "s3cret").status)
	assert.Equal(t, http.StatusUnauthorized, call(t, r, http.MethodGet, "/v2/", "dave", "s3creT").status)
}
