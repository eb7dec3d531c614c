package registry_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkManifestHead measures one manifest HEAD round trip over
// loopback HTTP with keep-alive: middleware, access decision, request
// record and go-containerregistry's handler.
func BenchmarkManifestHead(b *testing.B) {
	for _, bc := range []struct{ name, repo, user string }{
		{name: "anonymous-public", repo: "public/base"},
		{name: "basic-auth-private", repo: "team-a/app", user: alice},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := newRegistry(b, fixture())
			imgs := seeded(b, r)
			req, err := http.NewRequest(http.MethodHead, r.URL()+"/v2/"+bc.repo+"/manifests/"+imgs[bc.repo].Digest, nil)
			require.NoError(b, err)
			if bc.user != "" {
				req.SetBasicAuth(bc.user, password(bc.user))
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.StopTimer()
			r.Reset()
		})
	}
}

// BenchmarkServeHTTPManifestHead measures the same request without the
// network: what the middleware and go-containerregistry's handler cost.
func BenchmarkServeHTTPManifestHead(b *testing.B) {
	for _, bc := range []struct{ name, repo, user string }{
		{name: "anonymous-public", repo: "public/base"},
		{name: "basic-auth-private", repo: "team-a/app", user: alice},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := newRegistry(b, fixture())
			imgs := seeded(b, r)
			req := httptest.NewRequest(http.MethodHead, "/v2/"+bc.repo+"/manifests/"+imgs[bc.repo].Digest, nil)
			if bc.user != "" {
				req.SetBasicAuth(bc.user, password(bc.user))
			}
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				r.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
