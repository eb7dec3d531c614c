package criruntime_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// Request kinds the test registry counts.
const (
	kindPing     = "ping"
	kindManifest = "manifest"
	kindBlob     = "blob"
	kindOther    = "other"
)

const (
	adminUser = "admin"
	adminPass = "admin-secret"
)

// request is one request the test registry answered.
type request struct {
	Method string
	Kind   string
	Repo   string
	Status int
}

// testRegistry is go-containerregistry's registry behind a tiny Basic-auth
// and per-repository access middleware that records every request. Like a
// distribution registry with htpasswd, it challenges /v2/ and every
// repository path with "WWW-Authenticate: Basic".
type testRegistry struct {
	t    testing.TB
	srv  *httptest.Server
	Host string

	mu          sync.Mutex
	users       map[string]string   // user -> password
	tokens      map[string]string   // bearer token -> user
	readers     map[string][]string // repository -> users who may read it
	public      map[string]bool     // repositories anyone may read
	openPing    bool                // /v2/ answers 200 to anonymous requests
	noHead      bool                // HEAD of a manifest answers 405
	blockBlobs  chan struct{}       // when set, blob requests signal here and wait for cancellation
	requestsLog []request
}

func newTestRegistry(t testing.TB) *testRegistry {
	t.Helper()
	r := &testRegistry{
		t:       t,
		users:   map[string]string{adminUser: adminPass},
		tokens:  map[string]string{},
		readers: map[string][]string{},
		public:  map[string]bool{},
	}
	inner := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(r.middleware(inner))
	t.Cleanup(r.srv.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

func (r *testRegistry) addUser(user, pass string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.users[user] = pass
}

func (r *testRegistry) addToken(token, user string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tokens[token] = user
}

func (r *testRegistry) allow(repo string, users ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readers[repo] = append(r.readers[repo], users...)
}

func (r *testRegistry) makePublic(repo string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.public[repo] = true
}

func (r *testRegistry) set(fn func(r *testRegistry)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r)
}

// ref is the registry's name for repo:tag.
func (r *testRegistry) ref(repoTag string) string { return r.Host + "/" + repoTag }

// push uploads img as repo:tag (or repo@digest) with the admin account and
// clears the request log.
func (r *testRegistry) push(ref string, img v1.Image) {
	r.t.Helper()
	parsed, err := name.ParseReference(ref)
	require.NoError(r.t, err)
	require.NoError(r.t, remote.Write(parsed, img, remote.WithAuth(&authn.Basic{Username: adminUser, Password: adminPass})))
	r.reset()
}

// pushIndex uploads an index as ref with the admin account and clears the
// request log.
func (r *testRegistry) pushIndex(ref string, idx v1.ImageIndex) {
	r.t.Helper()
	parsed, err := name.ParseReference(ref)
	require.NoError(r.t, err)
	require.NoError(r.t, remote.WriteIndex(parsed, idx, remote.WithAuth(&authn.Basic{Username: adminUser, Password: adminPass})))
	r.reset()
}

func (r *testRegistry) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requestsLog = nil
}

// requests returns the requests answered since the last reset.
func (r *testRegistry) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.requestsLog...)
}

// count returns how many requests of kind were answered since the last reset.
func (r *testRegistry) count(kind string) int {
	n := 0
	for _, req := range r.requests() {
		if req.Kind == kind {
			n++
		}
	}
	return n
}

func (r *testRegistry) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		kind, repo := classify(req.URL.Path)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			r.mu.Lock()
			r.requestsLog = append(r.requestsLog, request{Method: req.Method, Kind: kind, Repo: repo, Status: rec.status})
			r.mu.Unlock()
		}()

		r.mu.Lock()
		user, authed := r.authenticate(req)
		allowed := r.allowed(kind, repo, req.Method, user, authed)
		noHead, block := r.noHead, r.blockBlobs
		r.mu.Unlock()

		if !allowed {
			rec.Header().Set("WWW-Authenticate", `Basic realm="test-registry"`)
			rec.Header().Set("Content-Type", "application/json")
			rec.WriteHeader(http.StatusUnauthorized)
			if req.Method != http.MethodHead {
				io.WriteString(rec, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			}
			return
		}
		if kind == kindManifest && req.Method == http.MethodHead && noHead {
			rec.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if kind == kindBlob && block != nil && req.Method == http.MethodGet {
			select {
			case block <- struct{}{}:
			case <-req.Context().Done():
			}
			<-req.Context().Done()
			rec.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(rec, req)
	})
}

// authenticate returns the user a request's Authorization header proves.
func (r *testRegistry) authenticate(req *http.Request) (string, bool) {
	if user, pass, ok := req.BasicAuth(); ok {
		want, known := r.users[user]
		return user, known && want == pass
	}
	if token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); ok {
		user, known := r.tokens[token]
		return user, known
	}
	return "", false
}

func (r *testRegistry) allowed(kind, repo, method, user string, authed bool) bool {
	if authed && user == adminUser {
		return true
	}
	if kind == kindPing {
		return authed || r.openPing
	}
	if method != http.MethodGet && method != http.MethodHead {
		return false
	}
	if r.public[repo] {
		return true
	}
	if !authed {
		return false
	}
	for _, u := range r.readers[repo] {
		if u == user {
			return true
		}
	}
	return false
}

// classify splits a registry path into its kind and repository.
func classify(path string) (kind, repo string) {
	if path == "/v2/" || path == "/v2" {
		return kindPing, ""
	}
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return kindOther, ""
	}
	for _, k := range []struct{ sep, kind string }{{"/manifests/", kindManifest}, {"/blobs/", kindBlob}} {
		if i := strings.LastIndex(rest, k.sep); i >= 0 {
			if strings.HasPrefix(rest[i+len(k.sep):], "uploads") {
				return kindOther, rest[:i]
			}
			return k.kind, rest[:i]
		}
	}
	return kindOther, ""
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// newEmbedded opens an Embedded over dir that reaches reg.
func newEmbedded(t testing.TB, dir string, opts ...criruntime.Option) *criruntime.Embedded {
	t.Helper()
	e, err := criruntime.NewEmbedded(dir, append([]criruntime.Option{criruntime.WithTransport(http.DefaultTransport)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// reopen closes e, as a process exiting does, and opens dir again.
func reopen(t testing.TB, e *criruntime.Embedded, dir string, opts ...criruntime.Option) *criruntime.Embedded {
	t.Helper()
	require.NoError(t, e.Close(context.Background()))
	return newEmbedded(t, dir, opts...)
}

// randomImage returns a small random image with n layers.
func randomImage(t testing.TB, layers int64) v1.Image {
	t.Helper()
	img, err := random.Image(512, layers)
	require.NoError(t, err)
	return img
}

func configDigest(t testing.TB, img v1.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	require.NoError(t, err)
	return h.String()
}

func manifestDigest(t testing.TB, img interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := img.Digest()
	require.NoError(t, err)
	return h.String()
}

func basic(user, pass string) *runtimeapi.AuthConfig {
	return &runtimeapi.AuthConfig{Username: user, Password: pass}
}

func spec(image string) *runtimeapi.ImageSpec { return &runtimeapi.ImageSpec{Image: image} }

// status returns the image spec names, or nil.
func status(t testing.TB, e *criruntime.Embedded, image string) *runtimeapi.Image {
	t.Helper()
	resp, err := e.ImageStatus(context.Background(), spec(image), false)
	require.NoError(t, err)
	return resp.GetImage()
}
