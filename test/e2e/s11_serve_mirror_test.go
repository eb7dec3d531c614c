package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/hostile"
)

// Scenario 11: `pullguard serve` on a mirrored node. containerd's
// hosts.toml (its CRI config_path, given to serve with
// --registry-config-path) sends the host name mirrored.invalid:5000, which
// does not resolve, to a mirror on 127.0.0.1 served over TLS with a CA of
// its own (named by the file's `ca`, in no trust store): a pull-through
// mirror in front of the suite's registry that logs every request it sees
// with its client. Only the mirror can serve those names, so the runtime's
// pull and serve's verification both go through it, and the registry
// behind it sees nothing it did not pass on. The token realm of the
// registry's challenge is an absolute URL on 127.0.0.1, fetched directly.
// A lying mirror (internal/hostile behind a TLS front of its own CA) for
// another host name is refused as the lying registries of scenario 9 are.
func TestServeMirror(t *testing.T) {
	need(t)
	alice, bob, carol, mallory := newTenant("s11-alice"), newTenant("s11-bob"), newTenant("s11-carol"), newTenant("s11-mallory")
	h.issuer.grant(alice.user, "s11/team-a/*", "pull")
	h.issuer.grant(carol.user, "s11/team-a/*", "pull")
	_, victim := pushVictim(t, "s11/team-a/app", 1101)
	const repo = "s11/team-a/app"
	const manifests = "/v2/" + repo + "/manifests/"

	mirror := startMirror(t, "http://"+host())
	mirrorHosts(t, "mirrored.invalid:5000", mirror)
	image := "mirrored.invalid:5000/" + repo + ":v1"
	d := startServe(t, newRoot(t), "--registry-config-path", h.containerd.hosts)
	pg := d.endpoint()
	records := func() float64 { return metricValue(t, d, `pullguard_credtracker_records{location="memory"}`) }
	// pull ensures image through serve for pod ns/name as crictlPull does
	// and returns crictl's output, whether it succeeded, the registry's
	// mark before it and what the mirror saw of it (logged).
	pull := func(t *testing.T, ns, name string, who *tenant) (string, bool, int, mirrorLog) {
		m, mm := mark(t), mirror.mark()
		out, ok := crictlPull(t, pg, ns, name, image, who)
		seen := mirror.since(mm)
		t.Logf("crictl: %s\nthe mirror saw:\n%s", out, seen)
		return out, ok, m, seen
	}

	t.Run("tenant A pulls by the mirrored name: through the mirror, verified there, recorded", func(t *testing.T) {
		out, ok, m, seen := pull(t, "team-a", "app-1", alice)
		require.True(t, ok, out)
		assert.Positive(t, seen.count("containerd", "HEAD", manifests+"v1", 200), "containerd resolved the tag at the mirror")
		assert.Positive(t, seen.count("containerd", "GET", "/v2/"+repo+"/blobs/", 200), "and fetched the blobs from it")
		assert.Equal(t, []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 200"}, seen.of("pullguard"),
			"serve's verification: its manifest GET, at the mirror, on the request's own challenge (no /v2/ ping)")
		assert.True(t, seen.allNamed("mirrored.invalid:5000"), "each request told the mirror the registry it stands for (ns=)")
		assert.Equal(t, len(seen), registryRequests(t, m), "the registry saw only what the mirror passed on")
		assert.Positive(t, trafficFor(t, m, repo).blobs)
		assert.False(t, inspecti(t, pg, image), "hidden: pulled with a tenant's credential")
		assert.True(t, inspecti(t, h.containerd.endpoint(), image), "containerd has it")
	})
	t.Run("tenant B is refused: no manifest served, no blob", func(t *testing.T) {
		before := records()
		out, ok, m, seen := pull(t, "team-b", "intruder", bob)
		assert.False(t, ok, out)
		assert.NotContains(t, out, bob.password)
		assert.Regexp(t, refused, out, "the registry's refusal, through the mirror, reaches the client")
		// docs/serve.md, "What a verification costs": a present image, a
		// refused credential: serve's GET 401, GET 401 at the mirror, and
		// that refusal is the pull's answer: the runtime is not asked
		// (its HEADs would be refused the same); the upstream serve then
		// tries does not resolve.
		assert.Equal(t, []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 401"}, seen.of("pullguard"))
		assert.Empty(t, seen.of("containerd"), "the runtime was not asked to pull")
		assert.Len(t, seen, 2, "no manifest served to tenant B, no blob")
		tf := trafficFor(t, m, repo)
		assert.Zero(t, tf.manifestOK)
		assert.Zero(t, tf.blobs)
		assert.False(t, inspecti(t, pg, image))
		assert.Equal(t, before, records(), "nothing recorded")
	})
	t.Run("tenant A again: no request", func(t *testing.T) {
		out, ok, m, seen := pull(t, "team-a", "app-2", alice)
		require.True(t, ok, out)
		assert.Empty(t, seen)
		assert.Zero(t, registryRequests(t, m))
	})
	t.Run("tenant C is verified through the mirror: serve's manifest GET, no runtime pull, no blob", func(t *testing.T) {
		out, ok, m, seen := pull(t, "team-c", "app", carol)
		require.True(t, ok, out)
		// docs/serve.md, "What a verification costs": a present image, a
		// new credential: GET manifest 401, GET manifest 200, at the first
		// mirror that answers; the runtime is not asked.
		assert.Equal(t, []string{"GET " + manifests + "v1 401", "GET " + manifests + "v1 200"}, seen.of("pullguard"))
		assert.Len(t, seen, 2, "nothing else reached the mirror (no request of containerd's)")
		tf := trafficFor(t, m, repo)
		assert.Equal(t, verifiedPresentManifests, tf.manifestOK)
		assert.Zero(t, tf.blobs)
		assert.Equal(t, 2, registryRequests(t, m), "the registry saw the mirror's two requests")
		out, ok, _, seen = pull(t, "team-c", "app-2", carol)
		require.True(t, ok, out)
		assert.Empty(t, seen, "and remembered")
	})

	for i, tt := range liarModes {
		t.Run("a lying mirror: "+tt.name, func(t *testing.T) {
			liar := startLiar(t, victim, tt.mode)
			front := startMirror(t, "http://"+liar.Host)
			name := fmt.Sprintf("liar-%d.invalid:5000", i)
			mirrorHosts(t, name, front)
			evil := name + "/evil/app:v1"
			before := records()
			m := mark(t)

			out, ok := crictlPull(t, pg, "team-b", "evil", evil, mallory)
			seen := front.since(0)
			t.Logf("crictl: %s\nthe lying mirror saw:\n%s", out, seen)
			assert.False(t, ok, "the pull through serve fails")
			assert.Contains(t, out, "PermissionDenied")
			assert.Contains(t, out, "the registry did not serve the manifest")
			assert.NotContains(t, out, mallory.password)
			assert.Positive(t, seen.count("containerd", "HEAD", "/v2/evil/app/manifests/v1", 200), "containerd resolved at the lying mirror")
			assert.Positive(t, seen.count("pullguard", "GET", "/v2/evil/app/manifests/v1", 0), "serve asked the lying mirror for the bytes")
			assert.True(t, inspecti(t, h.containerd.endpoint(), evil), "containerd named tenant A's content (the attack reached the runtime)")
			assert.Equal(t, criImageID(t, image), criImageID(t, evil), "and it is tenant A's image")
			assert.False(t, inspecti(t, pg, evil), "serve reports it absent")
			assert.Equal(t, before, records(), "nothing recorded")

			// Another tenant: serve asks the lying mirror for the
			// present image's manifest first; one that serves no bytes
			// answers 404, which is the pull's answer (no runtime pull).
			out, ok = crictlPull(t, pg, "team-c", "victim", evil, nil)
			assert.False(t, ok, out)
			if tt.mode == hostile.NoBytes {
				assert.Contains(t, out, "404 Not Found")
			} else {
				assert.Contains(t, out, "the registry did not serve the manifest")
			}
			tf := trafficFor(t, m, repo)
			assert.Zero(t, tf.blobs, "tenant A's registry served nothing to the intruders")
			assert.Zero(t, tf.manifestOK)
			assert.Equal(t, before, records())
		})
	}
}

// mirror is a TLS reverse proxy on 127.0.0.1 with a CA of its own, in
// front of a registry: a pull-through mirror holding the same content. It
// logs each request it answers (never a header's value, so no
// credential).
type mirror struct {
	host   string // 127.0.0.1:port
	caFile string // its CA, for hosts.toml's ca

	mu  sync.Mutex
	log mirrorLog
}

// mirrorRequest is one request the mirror answered. Client is the
// User-Agent's product: "containerd" for the runtime's pull, "pullguard"
// for serve's verification.
type mirrorRequest struct {
	Client, Method, Path, NS string
	Status                   int
}

type mirrorLog []mirrorRequest

func (l mirrorLog) String() string {
	var b strings.Builder
	for _, r := range l {
		fmt.Fprintf(&b, "%s %s %d ns=%s (%s)\n", r.Method, r.Path, r.Status, r.NS, r.Client)
	}
	return b.String()
}

// count counts the requests of client (any if "") with method (any if
// "") whose path starts with prefix and whose status is status (any if 0).
func (l mirrorLog) count(client, method, prefix string, status int) int {
	n := 0
	for _, r := range l {
		if (client == "" || r.Client == client) && (method == "" || r.Method == method) &&
			strings.HasPrefix(r.Path, prefix) && (status == 0 || r.Status == status) {
			n++
		}
	}
	return n
}

// of returns client's requests as "METHOD path status".
func (l mirrorLog) of(client string) []string {
	out := []string{}
	for _, r := range l {
		if r.Client == client {
			out = append(out, fmt.Sprintf("%s %s %d", r.Method, r.Path, r.Status))
		}
	}
	return out
}

// allNamed says whether every request named registry in its ns parameter.
func (l mirrorLog) allNamed(registry string) bool {
	for _, r := range l {
		if r.NS != registry {
			return false
		}
	}
	return len(l) > 0
}

func (m *mirror) mark() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.log)
}

func (m *mirror) since(mark int) mirrorLog {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(mirrorLog(nil), m.log[mark:]...)
}

// startMirror starts a mirror of backend (a URL); the test stops it.
func startMirror(t *testing.T, backend string) *mirror {
	t.Helper()
	u, err := url.Parse(backend)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(u)
	m := &mirror{}
	cert, caPEM := mirrorCertificate(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, _, _ := strings.Cut(r.UserAgent(), "/")
		rec := mirrorRequest{Client: client, Method: r.Method, Path: r.URL.Path, NS: r.URL.Query().Get("ns")}
		proxy.ServeHTTP(&loggingWriter{ResponseWriter: w, logged: func(status int) {
			rec.Status = status
			m.mu.Lock()
			m.log = append(m.log, rec)
			m.mu.Unlock()
		}}, r)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	m.host = ln.Addr().String()
	m.caFile = filepath.Join(h.dir, "mirror-"+strings.ReplaceAll(m.host, ":", "-")+"-ca.pem")
	require.NoError(t, os.WriteFile(m.caFile, caPEM, 0o644))
	return m
}

// loggingWriter logs the status when the header is written, before the
// client can see any of the response, so a request is in the log when its
// client is done.
type loggingWriter struct {
	http.ResponseWriter
	logged func(status int)
	done   bool
}

func (w *loggingWriter) WriteHeader(status int) {
	if !w.done {
		w.done = true
		w.logged(status)
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *loggingWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *loggingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// mirrorCertificate makes a CA of the mirror's own and a server
// certificate for 127.0.0.1 it signs; it returns the certificate and the
// CA in PEM.
func mirrorCertificate(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pullguard-e2e-mirror-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err = x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// mirrorHosts writes containerd's hosts.toml for registry (a host name that
// does not resolve): its mirror m first, over TLS with m's CA, then the
// registry itself, which no one can reach. The test removes it.
func mirrorHosts(t *testing.T, registry string, m *mirror) {
	t.Helper()
	dir := filepath.Join(h.containerd.hosts, registry)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n",
		"http://"+registry, "https://"+m.host, m.caFile)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o644))
}
