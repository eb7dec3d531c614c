package secureserving_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/internal/fakeapiserver"
	"github.com/pullguard/pullguard/pkg/secureserving"
)

const (
	scraperToken = "scraper-token-5f0c1e"
	deniedToken  = "denied-token-9a7b3d"
)

// logs captures klog's output at the highest verbosity serve allows with
// the endpoint on (secureserving.MaxVerbosity).
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func captureKlog(t *testing.T) *logs {
	l := &logs{}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	require.NoError(t, fs.Set("logtostderr", "false"))
	require.NoError(t, fs.Set("alsologtostderr", "false"))
	require.NoError(t, fs.Set("v", strconv.Itoa(secureserving.MaxVerbosity)))
	klog.SetOutput(l)
	t.Cleanup(func() {
		klog.Flush()
		require.NoError(t, fs.Set("v", "0"))
		require.NoError(t, fs.Set("logtostderr", "true"))
		klog.SetOutput(os.Stderr)
	})
	return l
}

// endpoint is a started secure endpoint and a client that trusts it.
type endpoint struct {
	url    string
	client *http.Client
}

// start parses args as serve would, with a listener of the test's on
// 127.0.0.1, and serves a handler of /metrics and /healthz until the test
// ends.
func start(t *testing.T, api *fakeapiserver.Server, root string, args ...string) endpoint {
	t.Helper()
	o := secureserving.NewOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.AddFlags(fs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	all := append([]string{"--secure-port", strconv.Itoa(port), "--bind-address", "127.0.0.1",
		"--authentication-kubeconfig", api.Kubeconfig, "--authorization-kubeconfig", api.Kubeconfig}, args...)
	require.NoError(t, fs.Parse(all))
	o.Serving.Listener = l
	o.Complete(root)
	require.NoError(t, o.Validate())
	ctx, cancel := context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "pullguard_build_info 1\n") })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok: protecting") })
	reports := make(chan error, 1)
	done := o.Run(ctx, "node-1", mux, clock.RealClock{}, klog.Background(), func(err error) { reports <- err })
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.NoError(t, <-reports, "up at the first attempt")
	pem, err := os.ReadFile(o.Serving.ServerCert.CertKey.CertFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}
	t.Cleanup(tr.CloseIdleConnections)
	return endpoint{url: "https://" + o.Address(), client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

func (e endpoint) get(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.url+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// givenFiles gives serve a certificate and key as an operator would.
func givenFiles(t *testing.T) []string {
	certFile, keyFile := fakeapiserver.ServingCertFiles(t)
	return []string{"--tls-cert-file", certFile, "--tls-private-key-file", keyFile}
}

func TestScrapes(t *testing.T) {
	modes := []struct {
		name     string
		args     func(t *testing.T) []string
		certFile string // under the root directory, or "" for given files
	}{
		{name: "self-signed in --cert-dir", args: func(*testing.T) []string { return nil }, certFile: "pki/pullguard.crt"},
		{name: "self-signed, --authentication-skip-lookup", args: func(*testing.T) []string { return []string{"--authentication-skip-lookup"} }, certFile: "pki/pullguard.crt"},
		{name: "given files", args: givenFiles},
	}
	cases := []struct {
		name     string
		path     string
		token    string
		wantCode int
		wantBody string
	}{
		{name: "metrics without a token", path: "/metrics", wantCode: http.StatusUnauthorized},
		{name: "metrics with a token the API server does not know", path: "/metrics", token: "unknown-token-1c2d", wantCode: http.StatusUnauthorized},
		{name: "metrics with a token and no RBAC rule", path: "/metrics", token: deniedToken, wantCode: http.StatusForbidden},
		{name: "metrics with a token and the RBAC rule", path: "/metrics", token: scraperToken, wantCode: http.StatusOK, wantBody: "pullguard_build_info 1\n"},
		{name: "healthz without a token", path: "/healthz", wantCode: http.StatusOK, wantBody: "ok: protecting"},
		{name: "healthz with a token and no RBAC rule", path: "/healthz", token: deniedToken, wantCode: http.StatusOK, wantBody: "ok: protecting"},
		{name: "another path without a token", path: "/debug/pprof/", wantCode: http.StatusUnauthorized},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			klogs := captureKlog(t)
			api := fakeapiserver.Start(t)
			api.Users = map[string]string{scraperToken: "system:serviceaccount:monitoring:prometheus", deniedToken: "system:serviceaccount:default:other"}
			api.Allowed = map[string]bool{"system:serviceaccount:monitoring:prometheus": true}
			root := t.TempDir()
			e := start(t, api, root, m.args(t)...)
			if m.certFile != "" {
				assert.FileExists(t, filepath.Join(root, m.certFile))
			} else {
				assert.NoDirExists(t, filepath.Join(root, "pki"), "given files: nothing generated")
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					code, body := e.get(t, c.path, c.token)
					assert.Equal(t, c.wantCode, code, body)
					if c.wantBody != "" {
						assert.Equal(t, c.wantBody, body)
					}
				})
			}
			for _, sar := range api.SubjectAccessReviews() {
				assert.NotEqual(t, "system:anonymous", sar.User, "no review is asked for a request without credentials")
			}
			klog.Flush()
			out := klogs.String()
			require.NotEmpty(t, out, "klog's output is captured")
			for _, tok := range []string{scraperToken, deniedToken, fakeapiserver.ClientToken} {
				assert.NotContains(t, out, tok, "a token was logged")
				assert.NotContains(t, out, base64.StdEncoding.EncodeToString([]byte(tok)), "a token was logged in base64")
			}
		})
	}
}

// TestAlwaysAllowedPaths: the paths served to anyone are
// --authorization-always-allow-paths, and only they: /metrics only when
// the operator lists it, /healthz then no longer.
func TestAlwaysAllowedPaths(t *testing.T) {
	api := fakeapiserver.Start(t)
	e := start(t, api, t.TempDir(), "--authentication-skip-lookup", "--authorization-always-allow-paths", "/metrics,/debug/*")
	cases := []struct {
		path     string
		wantCode int
	}{
		{path: "/metrics", wantCode: http.StatusOK},
		{path: "/debug/anything", wantCode: http.StatusNotFound}, // allowed by the prefix, served by no handler
		{path: "/healthz", wantCode: http.StatusUnauthorized},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			code, body := e.get(t, c.path, "")
			assert.Equal(t, c.wantCode, code, body)
		})
	}
	assert.Empty(t, api.SubjectAccessReviews(), "nothing asked for anonymous requests")
}
