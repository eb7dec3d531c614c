package registry_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/registry"
)

// FuzzAnonymousReadsOnlyPublic sends arbitrary methods and paths without
// credentials and checks the security property of the middleware: an
// anonymous request succeeds only on a public repository, and every
// refusal of a request inside /v2 carries the Basic challenge.
func FuzzAnonymousReadsOnlyPublic(f *testing.F) {
	r := newRegistry(f, fixture())
	imgs := seeded(f, r)
	for _, repo := range []string{"public/base", "team-a/app", "team-a/secret"} {
		f.Add("GET", "/v2/"+repo+"/manifests/v1")
		f.Add("HEAD", "/v2/"+repo+"/blobs/"+imgs[repo].Layers[0])
		f.Add("GET", "/v2/"+repo+"/tags/list")
	}
	f.Add("GET", "/v2/_catalog")
	f.Add("GET", "/v2/public/base/../../team-a/app/manifests/v1")
	f.Add("POST", "/v2/public/base/blobs/uploads/")
	f.Add("GET", "/v2/team-a/_catalog")
	f.Fuzz(func(t *testing.T, method, path string) {
		if !validMethod(method) {
			t.Skip()
		}
		r.Reset()
		req := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}, Host: "registry.test"}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)

		reqs := r.Requests()
		require.Len(t, reqs, 1)
		got := reqs[0]
		if w.Code < 300 {
			assert.True(t, got.Repository == "public/base", "anonymous %s %q answered %d on %q", method, path, w.Code, got.Repository)
			assert.Contains(t, []string{http.MethodGet, http.MethodHead}, method)
		}
		if w.Code == http.StatusUnauthorized {
			assert.Equal(t, registry.Challenge, w.Header().Get("WWW-Authenticate"))
		}
		if (path == "/v2" || strings.HasPrefix(path, "/v2/")) && got.Repository != "public/base" {
			assert.Equal(t, http.StatusUnauthorized, w.Code, "anonymous %s %q", method, path)
		}
	})
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}
