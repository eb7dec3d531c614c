package main_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/fakeapiserver"
	"github.com/pullguard/pullguard/internal/leak"
)

const (
	promToken  = "prometheus-token-3e8a41"
	otherToken = "other-token-7c2f90"
)

var secureAddr = regexp.MustCompile(`"Serving /metrics and /healthz securely".*address="([^"]+)"`)

// freePort is a port of 127.0.0.1 that was free a moment ago: serve binds
// --secure-port itself.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return strconv.Itoa(port)
}

// secureGet gets path from serve's secure endpoint at addr, trusting the
// certificate in certFile, with token ("" for none).
func secureGet(t *testing.T, addr, certFile, path, token string) (int, string) {
	t.Helper()
	pem, err := os.ReadFile(certFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestServeSecureEndpoint: serve's /metrics and /healthz on --secure-port,
// authenticated and authorized by the API server: 401 without a token, 403
// without the RBAC rule, 200 with it; /healthz, the same as the plain
// endpoint's, to anyone; the tokens in no line serve prints, at the
// highest verbosity it allows with the endpoint on.
func TestServeSecureEndpoint(t *testing.T) {
	modes := []struct {
		name string
		args func(t *testing.T, root string) (args []string, certFile string)
	}{
		{name: "a certificate generated at start", args: func(_ *testing.T, root string) ([]string, string) {
			return nil, filepath.Join(root, "pki", "pullguard.crt")
		}},
		{name: "given files", args: func(t *testing.T, _ string) ([]string, string) {
			certFile, keyFile := fakeapiserver.ServingCertFiles(t)
			return []string{"--tls-cert-file", certFile, "--tls-private-key-file", keyFile}, certFile
		}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			api := fakeapiserver.Start(t)
			api.Users = map[string]string{promToken: "system:serviceaccount:monitoring:prometheus", otherToken: "system:serviceaccount:default:other"}
			api.Allowed = map[string]bool{"system:serviceaccount:monitoring:prometheus": true}
			dir := shortDir(t)
			root := filepath.Join(dir, "root")
			extra, certFile := m.args(t, root)
			args := append([]string{"--image-service-endpoint", "embedded", "-v=7",
				"--secure-port", freePort(t), "--bind-address", "127.0.0.1",
				"--authentication-kubeconfig", api.Kubeconfig, "--authorization-kubeconfig", api.Kubeconfig}, extra...)
			d := startServe(t, filepath.Join(dir, "pg.sock"), root, args...)
			d.waitLog(t, "Serving /metrics and /healthz securely")
			addr := secureAddr.FindStringSubmatch(d.out.String())[1]
			_, plainHealth := d.get(t, "/healthz")

			cases := []struct {
				name, path, token string
				wantCode          int
				wantBody          string // contained
			}{
				{name: "metrics without a token", path: "/metrics", wantCode: http.StatusUnauthorized},
				{name: "metrics with a token and no RBAC rule", path: "/metrics", token: otherToken, wantCode: http.StatusForbidden},
				{name: "metrics with a token and the RBAC rule", path: "/metrics", token: promToken, wantCode: http.StatusOK, wantBody: "\npullguard_build_info{"},
				{name: "healthz without a token", path: "/healthz", wantCode: http.StatusOK, wantBody: plainHealth},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					code, body := secureGet(t, addr, certFile, c.path, c.token)
					assert.Equal(t, c.wantCode, code, body)
					assert.Contains(t, body, c.wantBody)
				})
			}
			assert.Equal(t, 0, d.stop(t), "serve stops with its secure endpoint")
			assert.Empty(t, leak.Scan(map[string]string{"serve's output": d.out.String()}, promToken, otherToken, fakeapiserver.ClientToken), "a token was logged")
		})
	}
}

// TestServeSecureEndpointAPIServerDown: an API server that does not answer
// at serve's start keeps neither the CRI socket nor /healthz from serving;
// only scrapes, which it must authorize, fail.
func TestServeSecureEndpointAPIServerDown(t *testing.T) {
	api := fakeapiserver.Start(t)
	kc, err := os.ReadFile(api.Kubeconfig)
	require.NoError(t, err)
	down := regexp.MustCompile(`server: https://127\.0\.0\.1:\d+`).ReplaceAll(kc, []byte("server: https://127.0.0.1:"+freePort(t)))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, down, 0o600))
	dir := shortDir(t)
	root := filepath.Join(dir, "root")
	d := startServe(t, filepath.Join(dir, "pg.sock"), root, "--image-service-endpoint", "embedded",
		"--secure-port", freePort(t), "--bind-address", "127.0.0.1",
		"--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig)
	d.waitLog(t, "Serving /metrics and /healthz securely")
	addr := secureAddr.FindStringSubmatch(d.out.String())[1]
	certFile := filepath.Join(root, "pki", "pullguard.crt")
	code, body := secureGet(t, addr, certFile, "/healthz", "")
	assert.Equal(t, http.StatusOK, code, body)
	code, body = secureGet(t, addr, certFile, "/metrics", promToken)
	assert.Equal(t, http.StatusUnauthorized, code, body, "a token no one could review")
	assert.Equal(t, 0, d.stop(t))
}

func TestServeSecureFlags(t *testing.T) {
	api := fakeapiserver.Start(t)
	kc := []string{"--authentication-kubeconfig", api.Kubeconfig, "--authorization-kubeconfig", api.Kubeconfig}
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no authentication kubeconfig", args: []string{"--secure-port", "10265", "--authorization-kubeconfig", api.Kubeconfig}, wantErr: "--secure-port is set but --authentication-kubeconfig is not"},
		{name: "no kubeconfig at all", args: []string{"--secure-port", "10265"}, wantErr: "--authorization-kubeconfig is not"},
		{name: "-v 8", args: append([]string{"--secure-port", "10265", "-v=8"}, kc...), wantErr: "-v is above 7 with --secure-port set"},
		{name: "a vmodule at 9", args: append([]string{"--secure-port", "10265", "--vmodule", "webhook=9"}, kc...), wantErr: `--vmodule "webhook=9"`},
		{name: "a certificate without its key", args: append([]string{"--secure-port", "10265", "--tls-cert-file", "/nonexistent.crt"}, kc...), wantErr: "--tls-cert-file and --tls-private-key-file go together"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := shortDir(t)
			res := pullguard(t, append([]string{"serve", "--listen", "unix://" + filepath.Join(dir, "pg.sock"), "--root-dir", filepath.Join(dir, "root"),
				"--image-service-endpoint", "embedded", "--metrics-bind-address", "0", "--admin-socket", ""}, c.args...)...)
			assert.NotEqual(t, 0, res.code)
			assert.Contains(t, res.stderr, c.wantErr)
			assert.NotContains(t, res.stderr, "pullguard: serving on", "serve refused before it served")
		})
	}
}

// TestServeSecureEndpointDown: a secure port held by another listener, or
// a certificate that cannot be read, at serve's start: serve still
// becomes ready and answers the CRI; the error is logged with the
// address, pullguard_secure_serving_up is 0 and the plain /healthz says
// why, still with 200; once the cause is gone, serve's retries bring the
// endpoint up.
func TestServeSecureEndpointDown(t *testing.T) {
	cases := []struct {
		name string
		// block makes the endpoint fail, with serve's extra arguments, what
		// the error says, and the fix.
		block func(t *testing.T, port string) (args []string, wantErr string, fix func())
	}{
		{name: "port held by another listener", block: func(t *testing.T, port string) ([]string, string, func()) {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			return nil, "address already in use", func() { require.NoError(t, l.Close()) }
		}},
		{name: "certificate file unreadable", block: func(t *testing.T, _ string) ([]string, string, func()) {
			certFile, keyFile := fakeapiserver.ServingCertFiles(t)
			cert, err := os.ReadFile(certFile)
			require.NoError(t, err)
			require.NoError(t, os.Remove(certFile))
			return []string{"--tls-cert-file", certFile, "--tls-private-key-file", keyFile}, certFile,
				func() { require.NoError(t, os.WriteFile(certFile, cert, 0o600)) }
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api := fakeapiserver.Start(t)
			api.Users = map[string]string{promToken: "system:serviceaccount:monitoring:prometheus"}
			api.Allowed = map[string]bool{"system:serviceaccount:monitoring:prometheus": true}
			port := freePort(t)
			extra, wantErr, fix := c.block(t, port)
			dir := shortDir(t)
			root := filepath.Join(dir, "root")
			addr := net.JoinHostPort("127.0.0.1", port)
			d := startServe(t, filepath.Join(dir, "pg.sock"), root, append([]string{"--image-service-endpoint", "embedded",
				"--secure-port", port, "--bind-address", "127.0.0.1",
				"--authentication-kubeconfig", api.Kubeconfig, "--authorization-kubeconfig", api.Kubeconfig}, extra...)...)

			// Ready, and answering the CRI.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := criClient(t, d.socket).ListImages(ctx, &runtimeapi.ListImagesRequest{})
			require.NoError(t, err, "serve answers the CRI with its secure endpoint down")

			d.waitLog(t, "The secure endpoint is down")
			assert.Regexp(t, `"The secure endpoint is down: serve goes on without it and tries again" err=".*`+regexp.QuoteMeta(wantErr)+`.*address="`+regexp.QuoteMeta(addr)+`"`, d.out.String())
			code, body := d.get(t, "/healthz")
			assert.Equal(t, http.StatusOK, code, "a liveness probe does not restart serve for its secure endpoint")
			assert.Contains(t, body, "warning: secure endpoint down: "+addr+": ")
			assert.Contains(t, body, wantErr)
			_, body = d.get(t, "/metrics")
			assert.Contains(t, body, "\npullguard_secure_serving_up 0\n")

			fix()
			d.waitLog(t, "Serving /metrics and /healthz securely")
			code, body = d.get(t, "/healthz")
			assert.Equal(t, http.StatusOK, code)
			assert.NotContains(t, body, "secure endpoint down")
			_, body = d.get(t, "/metrics")
			assert.Contains(t, body, "\npullguard_secure_serving_up 1\n")
			certFile := filepath.Join(root, "pki", "pullguard.crt")
			if extra != nil {
				certFile = extra[1]
			}
			code, body = secureGet(t, addr, certFile, "/metrics", promToken)
			assert.Equal(t, http.StatusOK, code, body)
			assert.Equal(t, 0, d.stop(t))
		})
	}
}
