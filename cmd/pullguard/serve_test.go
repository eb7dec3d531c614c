package main_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/registry"
)

// daemon is a running `pullguard serve`.
type daemon struct {
	cmd     *exec.Cmd
	socket  string
	root    string
	out     *lockedBuffer
	done    chan struct{}
	metrics string // host:port of /metrics and /healthz
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{} // signalled on every write
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	select {
	case b.ch <- struct{}{}:
	default:
	}
	return n, err
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// shortDir is a directory for sockets (their paths are limited to 107
// bytes), removed at the end of the test.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "pgserve")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

var metricsAddr = regexp.MustCompile(`"Serving /metrics and /healthz".*address="([^"]+)"`)

// startServe starts `pullguard serve` and waits until it serves (it prints
// "pullguard: serving on" to standard error); the process is killed at the
// end of the test if it still runs.
func startServe(t *testing.T, socket, root string, args ...string) *daemon {
	t.Helper()
	return startServeEnv(t, nil, "", socket, root, args...)
}

// startServeEnv is startServe with the environment env (nil: the test's)
// in the working directory dir ("": the test's).
func startServeEnv(t *testing.T, env []string, dir, socket, root string, args ...string) *daemon {
	t.Helper()
	d := &daemon{socket: socket, root: root, out: &lockedBuffer{ch: make(chan struct{}, 1)}, done: make(chan struct{})}
	all := append([]string{"serve", "--listen", "unix://" + socket, "--root-dir", root, "--metrics-bind-address", "127.0.0.1:0", "--kubelet-root-dir", filepath.Join(root, "no-kubelet"),
		"--admin-socket", filepath.Join(filepath.Dir(socket), "admin.sock"), "-v=2"}, args...)
	d.cmd = exec.Command(binary, all...)
	d.cmd.Env, d.cmd.Dir = env, dir
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	require.NoError(t, d.cmd.Start())
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		for _, pw := range passwords {
			assert.NotContains(t, d.out.String(), pw, "a password was logged")
		}
	})
	d.waitLog(t, "pullguard: serving on")
	if m := metricsAddr.FindStringSubmatch(d.out.String()); m != nil {
		d.metrics = m[1]
	}
	return d
}

// waitLog waits until serve's output holds want, failing if serve exits
// or 30 seconds pass first.
func (d *daemon) waitLog(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(d.out.String(), want) {
		select {
		case <-d.out.ch:
		case <-d.done:
			t.Fatalf("serve exited: %s", d.out.String())
		case <-deadline:
			t.Fatalf("serve did not log %q: %s", want, d.out.String())
		}
	}
}

// stop sends SIGTERM and waits for the exit code.
func (d *daemon) stop(t *testing.T) int {
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
	return d.cmd.ProcessState.ExitCode()
}

func (d *daemon) get(t *testing.T, path string) (int, string) {
	resp, err := http.Get("http://" + d.metrics + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestServeDrivenByRun runs the tenants' pods with `pullguard run` as a
// kubelet without its own gate, through a running `pullguard serve` on the
// embedded runtime: the proxy alone protects the image.
func TestServeDrivenByRun(t *testing.T) {
	w := newWorld(t)
	dir := shortDir(t)
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded")

	fi, err := os.Stat(d.socket)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o660), fi.Mode().Perm(), "socket mode")
	code, body := d.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok: protecting (policy NeverVerifyPreloadedImages)", body)

	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", filepath.Join(dir, "kubelet"),
		"--image-service-endpoint", "unix://"+d.socket, "--feature-gates", "KubeletEnsureSecretPulledImages=false", "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc := decodeRun(t, res.stdout)
	got := map[string]string{}
	for _, r := range doc.Results {
		got[r.Pod+"/"+r.Container] = r.Error
	}
	assert.Equal(t, map[string]string{
		"team-a/app-1/app":          "",
		"team-b/intruder/app":       "ErrImagePull",
		"team-b/intruder-never/app": "ErrImageNeverPull",
		"team-a/app-2/app":          "",
		"team-c/app/init":           "",
		"team-c/app/app":            "",
	}, got)
	assert.Positive(t, w.reg.Count(registry.Filter{Kind: registry.KindBlob, Repository: "team-a/app", User: "alice"}), "tenant A downloaded the image")
	assert.Zero(t, w.reg.Count(registry.Filter{Kind: registry.KindBlob, Repository: "team-a/app", User: "carol"}), "tenant C was verified with the manifest only")
	assert.Zero(t, w.reg.Count(registry.Filter{Kind: registry.KindBlob, Repository: "team-a/app", Anonymous: true, Status: http.StatusOK}), "tenant B got nothing")

	// Tenant A once more: answered from the record, no registry request.
	w.reg.Reset()
	res = pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", filepath.Join(dir, "kubelet"),
		"--image-service-endpoint", "unix://"+d.socket, "--feature-gates", "KubeletEnsureSecretPulledImages=false", "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Zero(t, w.reg.Count(registry.Filter{Repository: "team-a/app", User: "alice"}), "tenant A's pods reach no registry")
	assert.Zero(t, w.reg.Count(registry.Filter{Kind: registry.KindBlob}), "no blob is downloaded again")

	code, body = d.get(t, "/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `pullguard_criproxy_decisions_total{method="PullImage",outcome="answered",reason="credential_match"}`)
	assert.Contains(t, body, "pullguard_criproxy_requests_total")
	assert.Contains(t, body, "pullguard_credtracker_records")

	require.Equal(t, 0, d.stop(t))
	assert.NoFileExists(t, d.socket, "the socket is removed on SIGTERM")
	recs := pullguard(t, "records", "--root-dir", d.root, "-o", "json")
	require.Equal(t, 0, recs.code, recs.stderr)
	assert.Contains(t, recs.stdout, "cri-auth-", "the store was closed cleanly and holds the CRI credential's entry")
}

// TestServeNodeCredentials: the node's docker config in the kubelet's
// root directory holds alice's account. A pod with no pull secret pulls
// with it (the kubelet's node keyring), and serve, reading the same file
// from --kubelet-root-dir, records the pull as the kubelet does:
// node-accessible, so tenant B's pods, Never included, get the image.
func TestServeNodeCredentials(t *testing.T) {
	w := newWorld(t)
	dir := shortDir(t)
	kubeletRoot := filepath.Join(dir, "kubelet")
	require.NoError(t, os.MkdirAll(kubeletRoot, 0o700))
	auth := base64.StdEncoding.EncodeToString([]byte("alice:" + passwords["alice"]))
	require.NoError(t, os.WriteFile(filepath.Join(kubeletRoot, "config.json"), []byte(`{"auths":{"`+w.reg.Host()+`":{"auth":"`+auth+`"}}}`), 0o600))
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded", "--kubelet-root-dir", kubeletRoot)

	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", kubeletRoot,
		"--image-service-endpoint", "unix://"+d.socket, "--feature-gates", "KubeletEnsureSecretPulledImages=false", "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	for _, r := range decodeRun(t, res.stdout).Results {
		assert.Empty(t, r.Error, "%s/%s: every pod may use an image the node's credential pulled", r.Pod, r.Container)
	}
	require.Equal(t, 0, d.stop(t))
	assert.NotContains(t, d.out.String(), auth, "the docker config's auth was logged")
	free := nodeAccessible(t, d.root)
	assert.True(t, free[w.reg.Host()+"/team-a/app"], "the node's credential pulled team-a/app: node-accessible")
	assert.False(t, free[w.reg.Host()+"/public/tool"], "carol's own secret pulled public/tool: her entry, not the node's")
}

// TestServeNodeCredentialsHome: alice's account is in a docker config at
// HOME/.docker/config.json, and the kubelet, started by systemd without
// User= (kubeadm's unit), has no HOME: it never reads that file, and
// alice's pull secret pulls team-a/app for her pod alone. serve started
// the same way (no HOME, as pullguard.service) must not take the file for
// the node's: team-a/app stays hers, and tenant B's pods must verify.
// Given that HOME, serve would file the pull as node-accessible: the case
// the test tells apart.
func TestServeNodeCredentialsHome(t *testing.T) {
	for _, tt := range []struct {
		name     string
		home     bool
		nodeFree bool
	}{
		{name: "serve without HOME, as the kubelet", home: false, nodeFree: false},
		{name: "serve with a HOME the kubelet does not have", home: true, nodeFree: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			dir := shortDir(t)
			home, wd, kubeletRoot := filepath.Join(dir, "home"), filepath.Join(dir, "wd"), filepath.Join(dir, "kubelet")
			for _, d := range []string{filepath.Join(home, ".docker"), wd, kubeletRoot} {
				require.NoError(t, os.MkdirAll(d, 0o700))
			}
			auth := base64.StdEncoding.EncodeToString([]byte("alice:" + passwords["alice"]))
			require.NoError(t, os.WriteFile(filepath.Join(home, ".docker", "config.json"), []byte(`{"auths":{"`+w.reg.Host()+`":{"auth":"`+auth+`"}}}`), 0o600))

			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "HOME=") {
					env = append(env, kv)
				}
			}
			if tt.home {
				env = append(env, "HOME="+home)
			}
			d := startServeEnv(t, env, wd, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded", "--kubelet-root-dir", kubeletRoot)

			// The kubelet: no HOME, so no node credential; alice's pod
			// pulls with her secret.
			res := pullguardEnv(t, []string{"HOME="}, nil, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", kubeletRoot,
				"--image-service-endpoint", "unix://"+d.socket, "--feature-gates", "KubeletEnsureSecretPulledImages=false", "-o", "json")
			require.Contains(t, []int{0, 1}, res.code, res.stderr)
			require.Equal(t, 0, d.stop(t))
			assert.NotContains(t, d.out.String(), auth, "the docker config's auth was logged")

			free, seen := nodeAccessible(t, d.root)[w.reg.Host()+"/team-a/app"]
			require.True(t, seen, "team-a/app was pulled and recorded")
			assert.Equal(t, tt.nodeFree, free, "team-a/app node-accessible")
		})
	}
}

// nodeAccessible reads the records of serve's store at root
// (`pullguard records`): each recorded repository, and whether a record
// of it is node-accessible.
func nodeAccessible(t *testing.T, root string) map[string]bool {
	t.Helper()
	recs := pullguard(t, "records", "--root-dir", root, "-o", "json")
	require.Equal(t, 0, recs.code, recs.stderr)
	var doc struct {
		Records []struct {
			Repositories []struct {
				Name           string `json:"name"`
				NodeAccessible bool   `json:"nodeAccessible"`
			} `json:"repositories"`
		} `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(recs.stdout), &doc))
	free := map[string]bool{}
	for _, r := range doc.Records {
		for _, rr := range r.Repositories {
			free[rr.Name] = free[rr.Name] || rr.NodeAccessible
		}
	}
	return free
}

func TestServeSingleInstanceAndStaleSocket(t *testing.T) {
	dir := shortDir(t)
	socket := filepath.Join(dir, "pg.sock")
	root := filepath.Join(dir, "root")

	// A stale socket (its server gone, the file left) is replaced.
	stale, err := net.Listen("unix", socket)
	require.NoError(t, err)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, stale.Close())
	d := startServe(t, socket, root, "--image-service-endpoint", "embedded", "--metrics-bind-address", "0")

	// A second instance on the same root directory is refused.
	res := pullguard(t, "serve", "--listen", "unix://"+filepath.Join(dir, "other.sock"), "--root-dir", root, "--image-service-endpoint", "embedded", "--metrics-bind-address", "0")
	assert.NotEqual(t, 0, res.code)
	assert.Contains(t, res.stderr, "in use by another process")
	// Another root directory on the same, live, socket is refused too,
	// before it writes any state.
	other := filepath.Join(dir, "root2")
	res = pullguard(t, "serve", "--listen", "unix://"+socket, "--root-dir", other, "--image-service-endpoint", "embedded", "--metrics-bind-address", "0")
	assert.NotEqual(t, 0, res.code)
	assert.Contains(t, res.stderr, "in use by another process")
	assert.NoDirExists(t, filepath.Join(other, "credtracker"))

	// The first one still serves; it stops cleanly, and the root
	// directory can be used again.
	c, err := net.Dial("unix", socket)
	require.NoError(t, err)
	c.Close()
	require.Equal(t, 0, d.stop(t))
	d = startServe(t, socket, root, "--image-service-endpoint", "embedded", "--metrics-bind-address", "0")
	require.Equal(t, 0, d.stop(t))
}

// TestServeReadsTheKubeletsConfig: serve reads the kubelet's own
// configuration file, whose feature gates and other fields it ignores: the
// kubelet's gate off leaves serve's protection on.
func TestServeReadsTheKubeletsConfig(t *testing.T) {
	dir := shortDir(t)
	cfg := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
imageServiceEndpoint: unix:///run/pullguard/pullguard.sock
cgroupDriver: systemd
featureGates:
  RotateKubeletServerCertificate: true
  KubeletEnsureSecretPulledImages: false
`), 0o600))
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded", "--config", cfg)
	assert.NotContains(t, d.out.String(), "PASS-THROUGH", "the kubelet's gate is not serve's")
	code, body := d.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok: protecting (policy NeverVerifyPreloadedImages)", body)
	require.Equal(t, 0, d.stop(t))
	assert.FileExists(t, filepath.Join(d.root, "credtracker", "records.db"), "the protection keeps records")
}

// TestServeRegistryTimeoutBelowTheKubelets: the kubelet's
// runtimeRequestTimeout may be set at or below serve's default registry
// timeout (30s). Without --registry-request-timeout, serve then starts with
// half the kubelet's, and says so; a value given is kept when below the
// kubelet's (one at or above it is refused: TestServeBadInput).
func TestServeRegistryTimeoutBelowTheKubelets(t *testing.T) {
	tests := []struct {
		name           string
		kubeletTimeout string // "" : the kubelet's default
		args           []string
		wantWarning    string // "" : none about the registry timeout
	}{
		{name: "the kubelet's 20s, no flag", kubeletTimeout: "20s", wantWarning: "--registry-request-timeout is 10s"},
		{name: "the kubelet's 30s, no flag", kubeletTimeout: "30s", wantWarning: "--registry-request-timeout is 15s"},
		{name: "the kubelet's 20s, the flag below it", kubeletTimeout: "20s", args: []string{"--registry-request-timeout", "5s"}},
		{name: "the kubelet's default, no flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortDir(t)
			cfg := filepath.Join(dir, "config.yaml")
			content := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
			if tt.kubeletTimeout != "" {
				content += "runtimeRequestTimeout: " + tt.kubeletTimeout + "\n"
			}
			require.NoError(t, os.WriteFile(cfg, []byte(content), 0o600))
			d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), append([]string{"--image-service-endpoint", "embedded", "--config", cfg}, tt.args...)...)
			out := d.out.String()
			if tt.wantWarning != "" {
				assert.Contains(t, out, tt.wantWarning)
			} else {
				assert.NotContains(t, out, "--registry-request-timeout is")
			}
			require.Equal(t, 0, d.stop(t))
		})
	}
}

// TestServePassThroughIsLoud: a pass-through only when serve's own flag
// asks for it, and then said at start-up, on /healthz and in a metric.
func TestServePassThroughIsLoud(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		wantHealthz string
		wantGauge   string
		wantWarning bool
	}{
		{
			name:        "protecting by default",
			wantHealthz: "ok: protecting (policy NeverVerifyPreloadedImages)",
			wantGauge:   "pullguard_serve_protection_enabled 1",
		},
		{
			name:        "policy flag",
			args:        []string{"--image-pull-credentials-verification-policy", "AlwaysVerify"},
			wantHealthz: "ok: protecting (policy AlwaysVerify)",
			wantGauge:   "pullguard_serve_protection_enabled 1",
		},
		{
			name:        "pass-through asked for",
			args:        []string{"--feature-gates", "KubeletEnsureSecretPulledImages=false"},
			wantHealthz: "ok: pass-through, the protection is OFF (--feature-gates KubeletEnsureSecretPulledImages=false)",
			wantGauge:   "pullguard_serve_protection_enabled 0",
			wantWarning: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortDir(t)
			d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), append([]string{"--image-service-endpoint", "embedded"}, tt.args...)...)
			code, body := d.get(t, "/healthz")
			assert.Equal(t, http.StatusOK, code)
			assert.Equal(t, tt.wantHealthz, body)
			code, body = d.get(t, "/metrics")
			assert.Equal(t, http.StatusOK, code)
			assert.Contains(t, body, tt.wantGauge)
			out := d.out.String()
			if tt.wantWarning {
				assert.Contains(t, out, "pullguard: WARNING: pass-through, the protection is OFF")
				assert.Regexp(t, `(?m)^E\d{4} .*PASS-THROUGH: the protection is OFF`, out, "logged at error level")
			} else {
				assert.NotContains(t, out, "PASS-THROUGH")
				assert.NotContains(t, out, "WARNING")
			}
			require.Equal(t, 0, d.stop(t))
		})
	}
}

func TestServeBadInput(t *testing.T) {
	dir := shortDir(t)
	root := filepath.Join(dir, "root")
	providerConfig := filepath.Join(dir, "cp.yaml")
	require.NoError(t, os.WriteFile(providerConfig, []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{name: absent-plugin, matchImages: [registry.example], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}]\n"), 0o600))
	shortKubelet := filepath.Join(dir, "kubelet.yaml")
	require.NoError(t, os.WriteFile(shortKubelet, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nruntimeRequestTimeout: 20s\n"), 0o600))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad policy", []string{"--image-pull-credentials-verification-policy", "Sometimes"}, "Sometimes"},
		{"bad gate", []string{"--feature-gates", "NoSuchGate=true"}, "NoSuchGate"},
		{"tcp listen", []string{"--listen", "tcp://127.0.0.1:1"}, "--listen"},
		{"forward to itself", []string{"--image-service-endpoint", "unix://" + filepath.Join(dir, "pg.sock")}, "forward to itself"},
		{"bad unrecorded-images", []string{"--unrecorded-images", "maybe"}, "maybe"},
		{"missing config", []string{"--config", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"provider config without bin dir", []string{"--image-credential-provider-config", providerConfig}, "--image-credential-provider-bin-dir is required"},
		{"provider plugin missing", []string{"--image-credential-provider-config", providerConfig, "--image-credential-provider-bin-dir", dir}, "absent-plugin"},
		{"registry timeout zero", []string{"--registry-request-timeout", "0s"}, "--registry-request-timeout must be positive"},
		{"registry timeout negative", []string{"--registry-request-timeout", "-5s"}, "--registry-request-timeout must be positive"},
		{"registry timeout of the kubelet's", []string{"--registry-request-timeout", "2m"}, "must be below the kubelet's default runtimeRequestTimeout (2m0s)"},
		{"registry timeout above the config's", []string{"--config", shortKubelet, "--registry-request-timeout", "30s"}, "must be below the runtimeRequestTimeout of --config (20s)"},
		{"silence bound below a second", []string{"--silence-bound", "500ms"}, "--silence-bound must be 0 (off) or at least 1s, got 500ms"},
		{"silence bound negative", []string{"--silence-bound", "-1m"}, "--silence-bound must be 0 (off) or at least 1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--listen", "unix://" + filepath.Join(dir, "pg.sock"), "--root-dir", root, "--metrics-bind-address", "0"}, tc.args...)
			res := pullguard(t, args...)
			assert.NotEqual(t, 0, res.code)
			assert.Contains(t, res.stderr, tc.want)
			assert.NoDirExists(t, root, "bad input changes no state")
		})
	}
}

// TestServeSIGTERMDuringPull: a pull in flight when SIGTERM arrives
// finishes and is recorded before the daemon exits, and the socket is
// removed.
func TestServeSIGTERMDuringPull(t *testing.T) {
	w := newWorld(t)
	// A gate in front of the registry holds blob downloads until released.
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gate := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") {
			once.Do(func() { close(blocked) })
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.reg.ServeHTTP(rw, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = gate.Serve(l) }()
	defer gate.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	host := l.Addr().String()

	dir := shortDir(t)
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded", "--metrics-bind-address", "0")
	manifest := filepath.Join(dir, "pod.yaml")
	require.NoError(t, os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Secret
metadata: {name: regcred, namespace: team-a}
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '{"auths":{"`+host+`":{"username":"alice","password":"`+passwords["alice"]+`"}}}'
---
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: team-a}
spec:
  imagePullSecrets: [{name: regcred}]
  containers: [{name: app, image: "`+host+`/team-a/app:v1"}]
`), 0o600))
	run := exec.Command(binary, "run", "-f", manifest, "--root-dir", filepath.Join(dir, "kubelet"),
		"--image-service-endpoint", "unix://"+d.socket, "--feature-gates", "KubeletEnsureSecretPulledImages=false", "-o", "json")
	var out, errOut bytes.Buffer
	run.Stdout, run.Stderr = &out, &errOut
	require.NoError(t, run.Start())
	runDone := make(chan struct{})
	go func() { _ = run.Wait(); close(runDone) }() // its exit code is not the point: see below
	t.Cleanup(func() {
		select {
		case <-runDone:
		default:
			_ = run.Process.Kill()
			<-runDone
		}
	})
	// Every wait below ends on the event, on the process it waits for
	// exiting, or after two minutes: a failure elsewhere fails the test
	// with its cause instead of hanging the package until go test's
	// timeout.
	select {
	case <-blocked:
	case <-runDone:
		t.Fatalf("pullguard run exited before its pull reached the blobs:\n%s%s", out.String(), errOut.String())
	case <-time.After(2 * time.Minute):
		t.Fatal("the pull never reached the registry's blobs")
	}

	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	for !strings.Contains(d.out.String(), "Shutting down") {
		select {
		case <-d.out.ch:
		case <-d.done:
			t.Fatalf("serve exited with a pull in flight: %s", d.out.String())
		case <-time.After(2 * time.Minute):
			t.Fatalf("serve did not log its shutdown after SIGTERM: %s", d.out.String())
		}
	}
	close(release)
	// The client's own calls after the pull (it asks ImageStatus for the
	// image's ID) find the socket closed: serve takes no new call after
	// SIGTERM. The pull itself finished.
	select {
	case <-runDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("pullguard run did not end after the gate opened")
	}
	assert.Contains(t, out.String()+errOut.String(), "Successfully pulled image", "the pull in flight finished")
	select {
	case <-d.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not exit after its pull finished: %s", d.out.String())
	}
	assert.Equal(t, 0, d.cmd.ProcessState.ExitCode())
	assert.NoFileExists(t, d.socket)
	recs := pullguard(t, "records", "--root-dir", d.root, "-o", "json")
	require.Equal(t, 0, recs.code, recs.stderr)
	assert.Contains(t, recs.stdout, "cri-auth-", "the pull was recorded before the store closed")
	assert.Contains(t, recs.stdout, "team-a/app")
}
