package main_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/critest"
)

const (
	healthzProtecting  = "ok: protecting (policy NeverVerifyPreloadedImages)"
	healthzPassThrough = "ok: pass-through, the protection is OFF (--feature-gates KubeletEnsureSecretPulledImages=false)"
	// goodKubelet is deploy/kubelet/config-snippet.yaml's settings, with
	// SERVE for serve's socket.
	goodKubelet = kcHeader + `containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
imageServiceEndpoint: SERVE
registryPullQPS: 0
serializeImagePulls: false
maxParallelImagePulls: 10
`
	kcHeader   = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	kubeadmEnv = `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n"
)

// doctorNode is a node for doctor: the kubelet's files, a fake serve (a
// CRI image service on a unix socket and a /healthz), and a record store.
// Its outputs are normalized to the node's own paths where it can be.
type doctorNode struct {
	dir, socket, healthz, root              string
	kubeletConfig, kubeadmFlags, extraFlags string
}

// newDoctorNode writes the kubelet's files (SERVE in them stands for the
// fake serve's socket; "" writes no file) and starts the fakes, stopped at
// the end of the test. The root directory is a copy of store ("" for
// none).
func newDoctorNode(t *testing.T, config, kubeadm, extra, healthzBody, store string) *doctorNode {
	t.Helper()
	n := &doctorNode{dir: shortDir(t), socket: "unix://" + critest.Serve(t, critest.NewImageService())}
	write := func(name, content string) string {
		path := filepath.Join(n.dir, name)
		if content != "" {
			require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(content, "SERVE", n.socket)), 0o600))
		}
		return path
	}
	n.kubeletConfig = write("config.yaml", config)
	n.kubeadmFlags = write("kubeadm-flags.env", kubeadm)
	n.extraFlags = write("kubelet.default", extra)

	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(healthzBody)) }))
	t.Cleanup(hs.Close)
	n.healthz = strings.TrimPrefix(hs.URL, "http://")

	n.root = filepath.Join(n.dir, "root")
	if store != "" {
		require.NoError(t, os.CopyFS(n.root, os.DirFS(store)))
	} else {
		require.NoError(t, os.MkdirAll(n.root, 0o700))
	}
	return n
}

func (n *doctorNode) doctor(t *testing.T, args ...string) cliResult {
	t.Helper()
	return pullguard(t, append([]string{"doctor", "--kubelet-config", n.kubeletConfig,
		"--kubelet-flags-files", n.kubeadmFlags + "," + n.extraFlags,
		"--serve-socket", n.socket, "--serve-metrics-address", n.healthz, "--root-dir", n.root}, args...)...)
}

func (n *doctorNode) normalize(s string) string {
	s = strings.ReplaceAll(s, n.healthz, "127.0.0.1:PORT")
	s = strings.ReplaceAll(s, n.socket, "unix:///run/pullguard/pullguard.sock")
	return strings.ReplaceAll(s, n.dir, "NODE")
}

// servedStore returns a root directory holding the record store serve
// made (serve started and stopped on the embedded runtime).
func servedStore(t *testing.T) string {
	t.Helper()
	dir := shortDir(t)
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded", "--metrics-bind-address", "0")
	require.Equal(t, 0, d.stop(t))
	require.NoError(t, os.RemoveAll(filepath.Join(d.root, "runtime")))
	require.NoError(t, os.RemoveAll(filepath.Join(d.root, "no-kubelet")))
	return d.root
}

func TestDoctorGolden(t *testing.T) {
	store := servedStore(t)
	damaged := filepath.Join(shortDir(t), "root")
	require.NoError(t, os.CopyFS(damaged, os.DirFS(store)))
	require.NoError(t, os.WriteFile(filepath.Join(damaged, "credtracker", "records.db"), []byte(strings.Repeat("not a bbolt file\n", 512)), 0o600))
	newer := filepath.Join(shortDir(t), "root")
	require.NoError(t, os.CopyFS(newer, os.DirFS(store)))
	setStoreSchema(t, filepath.Join(newer, "credtracker", "records.db"), 3)
	older := filepath.Join(shortDir(t), "root")
	require.NoError(t, os.CopyFS(filepath.Join(older, "credtracker"), os.DirFS(filepath.Join("..", "..", "credtracker", "testdata", "schema1"))))

	tests := []struct {
		name, golden           string
		config, kubeadm, extra string
		healthz, store         string
		args                   []string
		wantCode               int
	}{
		{name: "correct node", golden: "doctor-correct.txt", config: goodKubelet, kubeadm: kubeadmEnv, healthz: healthzProtecting, store: store, wantCode: 0},
		{name: "pass-through", golden: "doctor-passthrough.txt", config: goodKubelet, kubeadm: kubeadmEnv, healthz: healthzPassThrough, wantCode: 1},
		{
			name: "kubelet not pointing at serve", golden: "doctor-notserve.txt",
			config:  strings.Replace(goodKubelet, "imageServiceEndpoint: SERVE", "imageServiceEndpoint: unix:///run/containerd/containerd.sock", 1),
			kubeadm: kubeadmEnv, healthz: healthzProtecting, store: store, wantCode: 1,
		},
		{
			name: "default throttle", golden: "doctor-throttle.txt",
			config: kcHeader + "imageServiceEndpoint: SERVE\n", kubeadm: kubeadmEnv,
			extra:   "# set by the node image\nKUBELET_EXTRA_ARGS=--registry-qps=5 --node-labels=pool=a\n",
			healthz: healthzProtecting, store: store, wantCode: 1,
		},
		{
			name: "default throttle json", golden: "doctor-throttle.json",
			config: kcHeader + "imageServiceEndpoint: SERVE\n", kubeadm: kubeadmEnv,
			extra:   "# set by the node image\nKUBELET_EXTRA_ARGS=--registry-qps=5 --node-labels=pool=a\n",
			healthz: healthzProtecting, store: store, args: []string{"-o", "json"}, wantCode: 1,
		},
		{
			name: "policy with the kubelet's gate off", golden: "doctor-rejected.txt",
			config:  goodKubelet + "imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages\nfeatureGates:\n  KubeletEnsureSecretPulledImages: false\n",
			kubeadm: kubeadmEnv, healthz: healthzProtecting, store: store, wantCode: 1,
		},
		{name: "unreadable store", golden: "doctor-store.txt", config: goodKubelet, kubeadm: kubeadmEnv, healthz: healthzProtecting, store: damaged, wantCode: 1},
		{name: "store of a newer pullguard", golden: "doctor-store-newer.txt", config: goodKubelet, kubeadm: kubeadmEnv, healthz: healthzProtecting, store: newer, wantCode: 1},
		{name: "store to migrate", golden: "doctor-store-older.txt", config: goodKubelet, kubeadm: kubeadmEnv, healthz: healthzProtecting, store: older, wantCode: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newDoctorNode(t, tt.config, tt.kubeadm, tt.extra, tt.healthz, tt.store)
			res := n.doctor(t, tt.args...)
			assert.Equal(t, tt.wantCode, res.code, res.stderr)
			golden(t, tt.golden, n.normalize(res.stdout))
		})
	}
}

// TestDoctorAgainstRunningServe: against a real serve, the store it holds
// is no problem and its protection is read from its /healthz.
func TestDoctorAgainstRunningServe(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantCode  int
		wantLines []string
	}{
		{name: "protecting", wantCode: 0, wantLines: []string{
			"OK       serve-protection        serve protects: ok: protecting (policy NeverVerifyPreloadedImages)",
			"is held by the running serve",
		}},
		{name: "pass-through", args: []string{"--feature-gates", "KubeletEnsureSecretPulledImages=false"}, wantCode: 1, wantLines: []string{
			"PROBLEM  serve-protection        serve is a pass-through, the protection is OFF",
			"fix: pullguard.service ExecStart: remove `--feature-gates KubeletEnsureSecretPulledImages=false`",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortDir(t)
			d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), append([]string{"--image-service-endpoint", "embedded"}, tt.args...)...)
			cfg := filepath.Join(dir, "config.yaml")
			require.NoError(t, os.WriteFile(cfg, []byte(strings.ReplaceAll(goodKubelet, "SERVE", "unix://"+d.socket)), 0o600))
			res := pullguard(t, "doctor", "--kubelet-config", cfg, "--kubelet-flags-files", filepath.Join(dir, "none.env"),
				"--serve-socket", "unix://"+d.socket, "--serve-metrics-address", d.metrics, "--root-dir", d.root)
			assert.Equal(t, tt.wantCode, res.code, res.stdout+res.stderr)
			for _, l := range tt.wantLines {
				assert.Contains(t, res.stdout, l)
			}
			require.Equal(t, 0, d.stop(t))
		})
	}
}

func TestDoctorBadOutput(t *testing.T) {
	res := pullguard(t, "doctor", "-o", "yaml")
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "--output must be text or json")
}
