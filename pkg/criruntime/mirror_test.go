package criruntime_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/hostile"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/registry"
)

// mirrored is a registry host name ("registry.example") whose
// containerd hosts.toml sends it to a mirror on 127.0.0.1 served over TLS
// with a CA of its own, then to the upstream registry (the file's
// server), as on a mirrored node.
type mirrored struct {
	upstream, mirror *registry.Registry
	mirrorHost       string // host:port of the mirror's TLS server
	caFile           string
	pushed           registry.Pushed
	digest           string // the manifest's digest
}

// newMirrored starts both registries with the same image; the mirror
// knows alice's account only when mirrorKnowsAlice.
func newMirrored(t *testing.T, mirrorKnowsAlice bool) *mirrored {
	t.Helper()
	account := func(user string) registry.Config {
		return registry.Config{Users: []registry.User{{Name: user, Password: user + "-pw"}},
			Repositories: []registry.Repository{{Name: "team-a/app", Readers: []string{user}}}}
	}
	up, err := registry.New(account("alice"), registry.WithBcryptCost(bcrypt.MinCost))
	require.NoError(t, err)
	t.Cleanup(func() { _ = up.Close() })
	mirrorAccount := account("bob")
	if mirrorKnowsAlice {
		mirrorAccount = account("alice")
	}
	mirror, err := registry.New(mirrorAccount, registry.WithBcryptCost(bcrypt.MinCost))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mirror.Close() })
	img, err := registry.Image(20, 1, 256)
	require.NoError(t, err)
	pushed, err := up.Push(context.Background(), "team-a/app", "v1", img)
	require.NoError(t, err)
	_, err = mirror.Push(context.Background(), "team-a/app", "v1", img)
	require.NoError(t, err)

	tlsMirror := httptest.NewUnstartedServer(mirror)
	tlsMirror.StartTLS()
	t.Cleanup(tlsMirror.Close)
	caFile := filepath.Join(t.TempDir(), "mirror-ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsMirror.Certificate().Raw}), 0o600))
	up.Reset()
	mirror.Reset()
	return &mirrored{upstream: up, mirror: mirror, mirrorHost: tlsMirror.Listener.Addr().String(), caFile: caFile, pushed: pushed, digest: pushed.Digest}
}

// checkVerified checks a verification of m's image: it failed with
// wantErr, naming no password, or (wantErr nil) proved m's digest.
func (m *mirrored) checkVerified(t *testing.T, got string, err, wantErr error) {
	t.Helper()
	if wantErr != nil {
		require.ErrorIs(t, err, wantErr)
		assert.NotContains(t, err.Error(), "-pw")
		return
	}
	require.NoError(t, err)
	assert.Equal(t, m.digest, got)
}

// hostsDir writes containerd's config_path with hosts.toml for host.
func hostsDir(t *testing.T, host, hostsToml string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, host), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, host, "hosts.toml"), []byte(hostsToml), 0o600))
	return dir
}

// seen is each request a registry answered, as "METHOD path status".
func seen(reg *registry.Registry) []string {
	out := []string{}
	for _, r := range reg.Requests() {
		out = append(out, fmt.Sprintf("%s %s %d", r.Method, r.Path, r.Status))
	}
	return out
}

// TestVerifyManifestThroughContainerdHosts: the verification reaches the
// registry as containerd's pull does with its hosts.toml (mirrors first,
// each with its own CA, the pod's credential presented to each on the
// request's own 401, no /v2/ ping, no HEAD), and every host's requests
// are the ones listed; a mirror that serves other bytes is refused, not
// passed over.
func TestVerifyManifestThroughContainerdHosts(t *testing.T) {
	const manifests = "/v2/team-a/app/manifests/"
	liar, err := hostile.Start("", "application/vnd.docker.distribution.manifest.v2+json", hostile.OtherBytes)
	require.NoError(t, err)
	t.Cleanup(liar.Close)

	tests := []struct {
		name        string
		mirrorKnows bool // the mirror knows alice's account
		// hosts is hosts.toml for registry.example; %[1]s is the
		// upstream, %[2]s the mirror, %[3]s its CA file, %[4]s the liar.
		hosts        string
		image        func(m *mirrored) string
		password     string
		wantErr      error
		wantMirror   []string
		wantUpstream []string
	}{
		{
			name:         "no hosts configuration: the registry itself, on the manifest's own challenge",
			image:        func(m *mirrored) string { return m.pushed.Reference },
			password:     "alice-pw",
			wantMirror:   []string{},
			wantUpstream: []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 200"},
		},
		{
			name:         "no hosts configuration, by digest",
			image:        func(m *mirrored) string { return m.pushed.DigestReference },
			password:     "alice-pw",
			wantMirror:   []string{},
			wantUpstream: []string{"GET " + manifests + "{digest} 401", "GET " + manifests + "{digest} 200"},
		},
		{
			name:         "a refused credential",
			image:        func(m *mirrored) string { return m.pushed.Reference },
			password:     "wrong-pw",
			wantErr:      criruntime.ErrUnauthorized,
			wantMirror:   []string{},
			wantUpstream: []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 401"},
		},
		{
			name:         "a TLS mirror with its own CA answers; the upstream is not asked",
			mirrorKnows:  true,
			hosts:        "server = \"http://%[1]s\"\n[host.\"https://%[2]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %[3]q\n",
			image:        func(*mirrored) string { return "registry.example/team-a/app:v1" },
			password:     "alice-pw",
			wantMirror:   []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 200"},
			wantUpstream: []string{},
		},
		{
			name:         "the mirror refuses the credential: the upstream decides",
			hosts:        "server = \"http://%[1]s\"\n[host.\"https://%[2]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %[3]q\n",
			image:        func(*mirrored) string { return "registry.example/team-a/app:v1" },
			password:     "alice-pw",
			wantMirror:   []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 401"},
			wantUpstream: []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 200"},
		},
		{
			// As containerd's resolver answers a pull through these hosts:
			// the failure that got furthest, a host's answer over a host
			// that cannot be reached.
			name:         "the mirror refuses, the upstream cannot be reached: the mirror's refusal is the answer",
			hosts:        "server = \"http://127.0.0.1:1\"\n[host.\"https://%[2]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %[3]q\n",
			image:        func(*mirrored) string { return "registry.example/team-a/app:v1" },
			password:     "alice-pw",
			wantErr:      criruntime.ErrUnauthorized,
			wantMirror:   []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 401"},
			wantUpstream: []string{},
		},
		{
			name:         "a mirror whose CA is not configured is not trusted: the upstream decides",
			mirrorKnows:  true,
			hosts:        "server = \"http://%[1]s\"\n[host.\"https://%[2]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
			image:        func(*mirrored) string { return "registry.example/team-a/app:v1" },
			password:     "alice-pw",
			wantMirror:   []string{},
			wantUpstream: []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 200"},
		},
		{
			name:         "a pull-only mirror does not resolve a tag",
			mirrorKnows:  true,
			hosts:        "server = \"http://%[1]s\"\n[host.\"https://%[2]s\"]\n  capabilities = [\"pull\"]\n  ca = %[3]q\n",
			image:        func(*mirrored) string { return "registry.example/team-a/app:v1" },
			password:     "alice-pw",
			wantMirror:   []string{},
			wantUpstream: []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 200"},
		},
		{
			name:         "a pull-only mirror serves a digest",
			mirrorKnows:  true,
			hosts:        "server = \"http://%[1]s\"\n[host.\"https://%[2]s\"]\n  capabilities = [\"pull\"]\n  ca = %[3]q\n",
			image:        func(m *mirrored) string { return "registry.example/team-a/app@" + m.digest },
			password:     "alice-pw",
			wantMirror:   []string{"GET " + manifests + "{digest} 401", "GET " + manifests + "{digest} 200"},
			wantUpstream: []string{},
		},
		{
			name:         "a lying mirror is refused, not passed over",
			hosts:        "server = \"http://%[1]s\"\n[host.\"http://%[4]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
			image:        func(*mirrored) string { return "registry.example/team-a/app:v1" },
			password:     "alice-pw",
			wantErr:      criruntime.ErrDigestMismatch,
			wantMirror:   []string{},
			wantUpstream: []string{},
		},
		{
			name:         "a lying mirror, by digest",
			hosts:        "server = \"http://%[1]s\"\n[host.\"http://%[4]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
			image:        func(m *mirrored) string { return "registry.example/team-a/app@" + m.digest },
			password:     "alice-pw",
			wantErr:      criruntime.ErrDigestMismatch,
			wantMirror:   []string{},
			wantUpstream: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMirrored(t, tt.mirrorKnows)
			dir := t.TempDir() // exists, holds no host: no configuration
			if tt.hosts != "" {
				dir = hostsDir(t, "registry.example", fmt.Sprintf(tt.hosts, m.upstream.Host(), m.mirrorHost, m.caFile, liar.Host))
			}
			before := len(liar.Requests())

			got, err := criruntime.VerifyManifest(context.Background(), tt.image(m), basic("alice", tt.password), []string{m.digest},
				criruntime.WithRegistryConfigPath(dir))

			m.checkVerified(t, got, err, tt.wantErr)
			want := func(reqs []string) []string {
				out := []string{}
				for _, r := range reqs {
					out = append(out, strings.ReplaceAll(r, "{digest}", m.digest))
				}
				return out
			}
			assert.Equal(t, want(tt.wantMirror), seen(m.mirror), "the mirror's requests")
			assert.Equal(t, want(tt.wantUpstream), seen(m.upstream), "the upstream's requests")
			for _, r := range liar.Requests()[before:] {
				assert.Equal(t, http.MethodGet, r.Method, "a HEAD proves nothing, so none is sent")
				assert.True(t, strings.HasPrefix(r.Path, manifests), "no /v2/ ping: %s", r.Path)
			}
		})
	}
}

// TestVerifyManifestWithAnAbsentConfigPath: a config path that does not
// exist is no configuration, as for containerd.
func TestVerifyManifestWithAnAbsentConfigPath(t *testing.T) {
	m := newMirrored(t, false)
	got, err := criruntime.VerifyManifest(context.Background(), m.pushed.Reference, basic("alice", "alice-pw"), nil,
		criruntime.WithRegistryConfigPath(filepath.Join(t.TempDir(), "absent")))
	require.NoError(t, err)
	assert.Equal(t, m.digest, got)
	assert.Len(t, seen(m.upstream), 2)
}

// TestVerifyManifestWithATokenRealm: a registry that answers with a
// Bearer challenge gets the pod's credential at its token realm, as
// containerd's authorizer sends it (an OAuth POST first, then a GET when
// the realm refuses the POST), for the pulled repository's scope only,
// and the manifest request again with the token.
func TestVerifyManifestWithATokenRealm(t *testing.T) {
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}`)
	want := "sha256:" + fmt.Sprintf("%x", sha256.Sum256(manifest))
	var mu sync.Mutex
	var log []string
	var scopes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		status := http.StatusOK
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			log = append(log, fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, status))
		}()
		switch {
		case req.URL.Path == "/token" && req.Method == http.MethodPost:
			status = http.StatusNotFound
		case req.URL.Path == "/token":
			mu.Lock()
			scopes = append(scopes, req.URL.Query().Get("scope"))
			mu.Unlock()
			if u, p, ok := req.BasicAuth(); !ok || u != "alice" || p != "alice-pw" {
				status = http.StatusUnauthorized
			} else {
				_, _ = w.Write([]byte(`{"token":"t-alice"}`))
				return
			}
		case req.Header.Get("Authorization") == "Bearer t-alice":
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			_, _ = w.Write(manifest)
			return
		default:
			status = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="test",scope="repository:team-a/app:pull"`, req.Host))
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	got, err := criruntime.VerifyManifest(context.Background(), host+"/team-a/app:v1", basic("alice", "alice-pw"), []string{want})

	require.NoError(t, err)
	assert.Equal(t, want, got)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"GET /v2/team-a/app/manifests/v1 401", "POST /token 404", "GET /token 200", "GET /v2/team-a/app/manifests/v1 200"}, log)
	assert.Equal(t, []string{"repository:team-a/app:pull"}, scopes)
}

// TestVerifyManifestPresentsTheCredentialAsContainerd: each form of a CRI
// credential reaches a host as containerd's CRI plugin sends it: a
// username and password, or the auth field decoded; not to a host other
// than the one its ServerAddress names (the request is then anonymous);
// a registry token not at all (containerd does not support it).
func TestVerifyManifestPresentsTheCredentialAsContainerd(t *testing.T) {
	m := newMirrored(t, true)
	authField := base64.StdEncoding.EncodeToString([]byte("alice:alice-pw"))
	tests := []struct {
		name    string
		auth    func(host string) *runtimeapi.AuthConfig
		wantErr error
		want    []string
	}{
		{name: "username and password", auth: func(string) *runtimeapi.AuthConfig { return basic("alice", "alice-pw") },
			want: []string{"GET 401", "GET 200"}},
		{name: "auth field", auth: func(string) *runtimeapi.AuthConfig { return &runtimeapi.AuthConfig{Auth: authField} },
			want: []string{"GET 401", "GET 200"}},
		{name: "server address of this host", auth: func(host string) *runtimeapi.AuthConfig {
			return &runtimeapi.AuthConfig{Username: "alice", Password: "alice-pw", ServerAddress: "http://" + host}
		}, want: []string{"GET 401", "GET 200"}},
		{name: "server address of another host: anonymous", auth: func(string) *runtimeapi.AuthConfig {
			return &runtimeapi.AuthConfig{Username: "alice", Password: "alice-pw", ServerAddress: "https://other.example"}
		}, wantErr: criruntime.ErrUnauthorized, want: []string{"GET 401"}},
		{name: "registry token: anonymous", auth: func(string) *runtimeapi.AuthConfig { return &runtimeapi.AuthConfig{RegistryToken: "alice-pw"} },
			wantErr: criruntime.ErrUnauthorized, want: []string{"GET 401"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m.upstream.Reset()
			got, err := criruntime.VerifyManifest(context.Background(), m.pushed.Reference, tt.auth(m.upstream.Host()), nil)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.NotContains(t, err.Error(), "alice-pw")
			} else {
				require.NoError(t, err)
				assert.Equal(t, m.digest, got)
			}
			var reqs []string
			for _, r := range m.upstream.Requests() {
				reqs = append(reqs, fmt.Sprintf("%s %d", r.Method, r.Status))
			}
			assert.Equal(t, tt.want, reqs, "the registry's requests")
		})
	}
}

// TestVerifyManifestPastAMirrorThatNeverAnswers: a mirror of the node's
// hosts.toml that takes connections and never answers (a mirror that is
// down behind a load balancer, or whose packets are dropped: containerd's
// pull waits out its dial timeout there, then asks the upstream) does not
// take the whole registry timeout: each host but the last has its share
// of what is left, so the upstream still decides within the limit, as it
// decides containerd's pull. When no host answers, the verification ends
// by the limit, naming a host.
func TestVerifyManifestPastAMirrorThatNeverAnswers(t *testing.T) {
	const limit = 2 * time.Second
	const manifests = "/v2/team-a/app/manifests/"
	tests := []struct {
		name         string
		upstreamDown bool // the upstream never answers either
		password     string
		wantErr      error
		wantUpstream []string
	}{
		{name: "the upstream serves", password: "alice-pw",
			wantUpstream: []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 200"}},
		{name: "the upstream refuses: its refusal is the answer", password: "wrong-pw", wantErr: criruntime.ErrUnauthorized,
			wantUpstream: []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 401"}},
		{name: "no host answers: the limit", upstreamDown: true, password: "alice-pw", wantErr: criruntime.ErrRegistryTimeout,
			wantUpstream: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMirrored(t, true)
			silent, err := hostile.Start("", "application/vnd.docker.distribution.manifest.v2+json", hostile.TLSStall)
			require.NoError(t, err)
			t.Cleanup(silent.Close)
			upstream := m.upstream.Host()
			if tt.upstreamDown {
				down, err := hostile.Start("", "application/vnd.docker.distribution.manifest.v2+json", hostile.TLSStall)
				require.NoError(t, err)
				t.Cleanup(down.Close)
				upstream = down.Host
			}
			dir := hostsDir(t, "registry.example", fmt.Sprintf("server = \"http://%s\"\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", upstream, silent.Host))

			start := time.Now()
			got, err := criruntime.VerifyManifest(context.Background(), "registry.example/team-a/app:v1", basic("alice", tt.password), []string{m.digest},
				criruntime.WithRegistryConfigPath(dir), criruntime.WithRegistryTimeout(limit))
			took := time.Since(start)

			m.checkVerified(t, got, err, tt.wantErr)
			select {
			case <-silent.Attacked():
			default:
				t.Error("the mirror was not asked first")
			}
			assert.Less(t, took, limit+limit/2, "the verification ends by its limit")
			assert.Equal(t, tt.wantUpstream, seen(m.upstream), "the upstream's requests")
		})
	}
}
