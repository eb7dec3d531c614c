package main_test

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/critest"
)

const (
	healthzProtecting  = "ok: protecting (policy NeverVerifyPreloadedImages)"
	healthzPassThrough = "ok: pass-through, the protection is OFF (--feature-gates KubeletEnsureSecretPulledImages=false)"
	// goodKubelet is deploy/kubelet/config-snippet.yaml's settings, with
	// SERVE for serve's socket and RUNTIME for the runtime's.
	goodKubelet = kcHeader + `containerRuntimeEndpoint: RUNTIME
imageServiceEndpoint: SERVE
registryPullQPS: 0
serializeImagePulls: false
maxParallelImagePulls: 10
`
	kcHeader   = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	kubeadmEnv = `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=RUNTIME --pod-infra-container-image=registry.k8s.io/pause:3.10 --root-dir=NODE/kubelet"` + "\n"
	// goodUnit is serve's unit as deploy/systemd ships it, with NODE for
	// the node's directory.
	goodUnit = `[Unit]
Description=pullguard
[Service]
Type=simple
ExecStart=/usr/local/bin/pullguard serve \
  --listen SERVE \
  --image-service-endpoint RUNTIME \
  --root-dir NODE/root \
  --config NODE/config.yaml \
  --kubelet-root-dir NODE/kubelet \
  --metrics-bind-address HEALTHZ
ProtectSystem=strict
ReadWritePaths=/var/lib/pullguard /run/pullguard /run/containerd
ProtectHome=read-only
`
)

// Files of the host root for the node-credentials checks: the kubelet's
// unit as kubeadm's package gives it (no User=, no HOME), one with
// User=root, and install's drop-in of serve for that one.
const (
	kubeletUnitPath = "usr/lib/systemd/system/kubelet.service"
	kubeletKubeadm  = "[Service]\nExecStart=/usr/bin/kubelet $KUBELET_KUBEADM_ARGS\n"
	kubeletUserRoot = kubeletKubeadm + "User=root\n"
	serveHomeRoot   = "[Service]\nEnvironment=HOME=/root\n"
)

// doctorLayout is a node for doctor. In every file, SERVE stands for the
// fake serve's socket, RUNTIME for the fake runtime's, HEALTHZ for serve's
// /healthz address and NODE for the node's directory.
type doctorLayout struct {
	config, kubeadm, extra string
	// dropins are files of the kubelet's --config-dir, NODE/conf.d.
	dropins map[string]string
	// unit is serve's unit, NODE/pullguard.service; unitDropins its
	// pullguard.service.d.
	unit        string
	unitDropins map[string]string
	// files are other files of the node, by path under NODE.
	files map[string]string
	// host, when set, are files of the node's root file system, NODE/host,
	// given to doctor as --host-root (the kubelet's unit, /root/.docker).
	host map[string]string
	// healthz is /healthz's body; healthzCode its status (200 if 0).
	healthz     string
	healthzCode int
	// runtimeDown: nothing answers at RUNTIME.
	runtimeDown bool
	store       string
	// configz, when set, is the API server's answer to GET
	// /api/v1/nodes/node-a/proxy/configz (its status configzCode, 200 if
	// 0); doctor is then given a --kubeconfig for it.
	configz     string
	configzCode int
	// configzHang: the API server never answers.
	configzHang bool
}

// runtimeDownServe answers as serve does while its runtime is down.
type runtimeDownServe struct{ runtimeapi.ImageServiceServer }

func (runtimeDownServe) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return nil, status.Error(codes.Unavailable, "connection error: dial unix /run/containerd/containerd.sock: connect: no such file or directory")
}

// doctorNode is a node for doctor: the kubelet's files, serve's unit, a
// fake serve (a CRI image service on a unix socket and a /healthz), a fake
// runtime, and a record store. Its outputs are normalized to the node's
// own paths where it can be.
type doctorNode struct {
	dir, socket, runtime, healthz, root     string
	apiServer, kubeconfig                   string
	kubeletConfig, kubeadmFlags, extraFlags string
	unit                                    string
	hostRoot                                string
}

// newDoctorNode writes the layout's files and starts its fakes, stopped at
// the end of the test. The root directory is a copy of l.store ("" for
// none).
func newDoctorNode(t *testing.T, l doctorLayout) *doctorNode {
	t.Helper()
	var serve runtimeapi.ImageServiceServer = critest.NewImageService()
	if l.runtimeDown {
		serve = runtimeDownServe{serve}
	}
	n := &doctorNode{dir: shortDir(t), socket: "unix://" + critest.Serve(t, serve)}
	if l.runtimeDown {
		n.runtime = "unix://" + filepath.Join(shortDir(t), "containerd.sock")
	} else {
		n.runtime = "unix://" + critest.Serve(t, critest.NewImageService())
	}
	code := l.healthzCode
	if code == 0 {
		code = http.StatusOK
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(l.healthz))
	}))
	t.Cleanup(hs.Close)
	n.healthz = strings.TrimPrefix(hs.URL, "http://")
	write := func(name, content string) string {
		path := filepath.Join(n.dir, name)
		if content != "" {
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
			content = strings.NewReplacer("SERVE", n.socket, "RUNTIME", n.runtime, "HEALTHZ", n.healthz, "NODE", n.dir).Replace(content)
			require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		}
		return path
	}
	n.kubeletConfig = write("config.yaml", l.config)
	n.kubeadmFlags = write("kubeadm-flags.env", l.kubeadm)
	n.extraFlags = write("kubelet.default", l.extra)
	n.unit = write("pullguard.service", l.unit)
	for name, data := range l.dropins {
		write(filepath.Join("conf.d", name), data)
	}
	for name, data := range l.unitDropins {
		write(filepath.Join("pullguard.service.d", name), data)
	}
	for name, data := range l.files {
		write(name, data)
	}
	for name, data := range l.host {
		write(filepath.Join("host", name), data)
	}
	if l.host != nil {
		n.hostRoot = filepath.Join(n.dir, "host")
	}
	if l.configz != "" || l.configzHang {
		n.startAPIServer(t, l.configz, l.configzCode, l.configzHang)
	}
	n.root = filepath.Join(n.dir, "root")
	if l.store != "" {
		require.NoError(t, os.CopyFS(n.root, os.DirFS(l.store)))
	} else {
		require.NoError(t, os.MkdirAll(n.root, 0o700))
	}
	return n
}

// startAPIServer serves GET /api/v1/nodes/node-a/proxy/configz over TLS,
// to the bearer token of the kubeconfig it writes, as the API server
// proxies a kubelet's /configz.
func (n *doctorNode) startAPIServer(t *testing.T, configz string, code int, hang bool) {
	t.Helper()
	if code == 0 {
		code = http.StatusOK
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer doctor-token":
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		case r.Method != http.MethodGet || r.URL.Path != "/api/v1/nodes/node-a/proxy/configz":
			http.NotFound(w, r)
		case hang:
			<-r.Context().Done()
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = w.Write([]byte(strings.NewReplacer("SERVE", n.socket, "RUNTIME", n.runtime).Replace(configz)))
		}
	}))
	t.Cleanup(srv.Close)
	n.apiServer = srv.URL
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	n.kubeconfig = filepath.Join(n.dir, "admin.conf")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: u, user: {token: doctor-token}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, srv.URL, base64.StdEncoding.EncodeToString(ca))
	require.NoError(t, os.WriteFile(n.kubeconfig, []byte(kc), 0o600))
}

// doctor runs doctor on the node, with HOME at NODE/home/root: doctor's
// own HOME, which is not the kubelet's.
func (n *doctorNode) doctor(t *testing.T, args ...string) cliResult {
	t.Helper()
	all := []string{"doctor", "--kubelet-config", n.kubeletConfig,
		"--kubelet-flags-files", n.kubeadmFlags + "," + n.extraFlags, "--serve-unit", n.unit,
		"--serve-socket", n.socket, "--serve-metrics-address", n.healthz, "--root-dir", n.root}
	if n.kubeconfig != "" {
		all = append(all, "--kubeconfig", n.kubeconfig, "--node-name", "node-a")
	}
	if n.hostRoot != "" {
		all = append(all, "--host-root", n.hostRoot)
	}
	return pullguardEnv(t, []string{"HOME=" + filepath.Join(n.dir, "home", "root")}, nil, append(all, args...)...)
}

func (n *doctorNode) normalize(s string) string {
	if n.apiServer != "" {
		s = strings.ReplaceAll(s, n.apiServer, "https://127.0.0.1:APISERVER")
	}
	s = strings.ReplaceAll(s, n.healthz, "127.0.0.1:PORT")
	s = strings.ReplaceAll(s, n.socket, "unix:///run/pullguard/pullguard.sock")
	s = strings.ReplaceAll(s, n.runtime, "unix:///run/containerd/containerd.sock")
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

// TestDoctorGolden: doctor's report on each layout, as an operator reads
// it: the file and line, the flag, the fix.
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

	good := doctorLayout{config: goodKubelet, kubeadm: kubeadmEnv, unit: goodUnit, healthz: healthzProtecting, store: store}
	with := func(change func(l *doctorLayout)) doctorLayout {
		l := good
		change(&l)
		return l
	}
	// The kubeadm file as kubeadm writes it, the snippet's settings in a
	// drop-in of --config-dir.
	kubeadmFile := kcHeader + "cgroupDriver: systemd\nclusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\ncontainerRuntimeEndpoint: RUNTIME\n"
	snippetDropIn := kcHeader + "imageServiceEndpoint: SERVE\nregistryPullQPS: 0\nserializeImagePulls: false\nmaxParallelImagePulls: 10\n"
	dockerConfig := `{"auths": {"registry.example": {"auth": "dTpw"}}}`
	providers := "--image-credential-provider-config=/etc/kubernetes/credential-providers.yaml --image-credential-provider-bin-dir=/usr/libexec/kubernetes/credential-providers"

	tests := []struct {
		name, golden string
		layout       doctorLayout
		args         []string
		wantCode     int
	}{
		{name: "healthy node", golden: "doctor-correct.txt", layout: good, wantCode: 0},
		{name: "pass-through", golden: "doctor-passthrough.txt", layout: with(func(l *doctorLayout) { l.healthz, l.store = healthzPassThrough, "" }), wantCode: 1},
		{
			name: "kubelet not pointing at serve", golden: "doctor-notserve.txt",
			layout: with(func(l *doctorLayout) {
				l.config = strings.Replace(goodKubelet, "imageServiceEndpoint: SERVE", "imageServiceEndpoint: RUNTIME", 1)
			}),
			wantCode: 1,
		},
		{
			name: "default throttle", golden: "doctor-throttle.txt",
			layout: with(func(l *doctorLayout) {
				l.config = kcHeader + "containerRuntimeEndpoint: RUNTIME\nimageServiceEndpoint: SERVE\n"
				l.extra = "# set by the node image\nKUBELET_EXTRA_ARGS=--registry-qps=5 --node-labels=pool=a\n"
			}),
			wantCode: 1,
		},
		{
			name: "default throttle json", golden: "doctor-throttle.json",
			layout: with(func(l *doctorLayout) {
				l.config = kcHeader + "containerRuntimeEndpoint: RUNTIME\nimageServiceEndpoint: SERVE\n"
				l.extra = "# set by the node image\nKUBELET_EXTRA_ARGS=--registry-qps=5 --node-labels=pool=a\n"
			}),
			args: []string{"-o", "json"}, wantCode: 1,
		},
		{
			name: "policy with the kubelet's gate off", golden: "doctor-rejected.txt",
			layout: with(func(l *doctorLayout) {
				l.config = goodKubelet + "imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages\nfeatureGates:\n  KubeletEnsureSecretPulledImages: false\n"
			}),
			wantCode: 1,
		},
		{name: "unreadable store", golden: "doctor-store.txt", layout: with(func(l *doctorLayout) { l.store = damaged }), wantCode: 1},
		{name: "store of a newer pullguard", golden: "doctor-store-newer.txt", layout: with(func(l *doctorLayout) { l.store = newer }), wantCode: 1},
		{name: "store to migrate", golden: "doctor-store-older.txt", layout: with(func(l *doctorLayout) { l.store = older }), wantCode: 0},
		{
			name: "kubeadm file, serve's settings in a --config-dir drop-in", golden: "doctor-dropins.txt",
			layout: with(func(l *doctorLayout) {
				l.config = kubeadmFile
				l.kubeadm = strings.Replace(kubeadmEnv, `"--container`, `"--config-dir=NODE/conf.d --container`, 1)
				l.dropins = map[string]string{"50-pullguard.conf": snippetDropIn, "README": "not read", "99-off.conf.disabled": kcHeader + "registryPullQPS: 5\n"}
			}),
			wantCode: 0,
		},
		{
			name: "a later drop-in undoes serve's settings", golden: "doctor-dropins-undone.txt",
			layout: with(func(l *doctorLayout) {
				l.config = kubeadmFile
				l.kubeadm = strings.Replace(kubeadmEnv, `"--container`, `"--config-dir=NODE/conf.d --container`, 1)
				l.dropins = map[string]string{"50-pullguard.conf": snippetDropIn, "60-node-image.conf": kcHeader + "registryPullQPS: 5\nimageServiceEndpoint: RUNTIME\n"}
			}),
			wantCode: 1,
		},
		{
			name: "k3s: the kubelet's runtime is not serve's", golden: "doctor-k3s.txt",
			layout: with(func(l *doctorLayout) {
				l.config = strings.Replace(goodKubelet, "containerRuntimeEndpoint: RUNTIME", "containerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock", 1)
				l.kubeadm = ""
			}),
			wantCode: 1,
		},
		{
			name: "credential providers: the kubelet's only", golden: "doctor-providers-kubelet.txt",
			layout:   with(func(l *doctorLayout) { l.extra = "KUBELET_EXTRA_ARGS=\"" + providers + "\"\n" }),
			wantCode: 1,
		},
		{
			name: "credential providers: serve's only", golden: "doctor-providers-serve.txt",
			layout: with(func(l *doctorLayout) {
				l.unit = strings.Replace(goodUnit, "--config NODE/config.yaml \\", "--config NODE/config.yaml \\\n  --image-credential-provider-config /etc/kubernetes/credential-providers.yaml \\", 1)
			}),
			wantCode: 1,
		},
		{
			name: "credential providers: other files", golden: "doctor-providers-differ.txt",
			layout: with(func(l *doctorLayout) {
				l.extra = "KUBELET_EXTRA_ARGS=\"" + providers + "\"\n"
				l.unitDropins = map[string]string{"10-providers.conf": "[Service]\nExecStart=\nExecStart=/usr/local/bin/pullguard serve --listen SERVE --image-service-endpoint RUNTIME --root-dir NODE/root --kubelet-root-dir NODE/kubelet --metrics-bind-address HEALTHZ --image-credential-provider-config /etc/pullguard/providers.yaml --image-credential-provider-bin-dir /usr/libexec/kubernetes/credential-providers\n"}
			}),
			wantCode: 1,
		},
		{
			name: "credential providers: the same", golden: "doctor-providers-same.txt",
			layout: with(func(l *doctorLayout) {
				l.extra = "KUBELET_EXTRA_ARGS=\"" + providers + "\"\n"
				l.unitDropins = map[string]string{"10-providers.conf": "[Service]\nExecStart=\nExecStart=/usr/local/bin/pullguard serve --listen SERVE --image-service-endpoint RUNTIME --root-dir NODE/root --kubelet-root-dir NODE/kubelet --metrics-bind-address HEALTHZ --image-credential-provider-config /etc/kubernetes/credential-providers.yaml --image-credential-provider-bin-dir /usr/libexec/kubernetes/credential-providers\n"}
			}),
			wantCode: 0,
		},
		{
			name: "node credentials hidden by ProtectHome", golden: "doctor-sandbox-home.txt",
			layout: with(func(l *doctorLayout) {
				l.unit = strings.Replace(goodUnit, "ProtectHome=read-only", "ProtectHome=true", 1)
				l.unitDropins = map[string]string{"20-kubelet.conf": serveHomeRoot}
				l.host = map[string]string{kubeletUnitPath: kubeletUserRoot, "root/.docker/config.json": dockerConfig}
			}),
			wantCode: 1,
		},
		{
			name: "node credentials hidden by InaccessiblePaths", golden: "doctor-sandbox-inaccessible.txt",
			layout: with(func(l *doctorLayout) {
				l.unitDropins = map[string]string{"20-harden.conf": "[Service]\nInaccessiblePaths=-NODE/kubelet/config.json /boot\n"}
				l.files = map[string]string{"kubelet/config.json": dockerConfig}
			}),
			wantCode: 1,
		},
		{
			name: "node credentials readable", golden: "doctor-sandbox-readable.txt",
			layout: with(func(l *doctorLayout) {
				l.unitDropins = map[string]string{"20-kubelet.conf": serveHomeRoot}
				l.host = map[string]string{kubeletUnitPath: kubeletUserRoot, "root/.docker/config.json": dockerConfig}
			}),
			wantCode: 0,
		},
		{
			// kubeadm's kubelet has no HOME: it never reads
			// /root/.docker/config.json, nor does serve without User=.
			name: "kubelet without HOME, /root/.docker/config.json present", golden: "doctor-home-kubeadm.txt",
			layout: with(func(l *doctorLayout) {
				l.host = map[string]string{kubeletUnitPath: kubeletKubeadm, "root/.docker/config.json": dockerConfig}
			}),
			wantCode: 0,
		},
		{
			name: "serve with HOME=/root, the kubelet without", golden: "doctor-home-serve-root.txt",
			layout: with(func(l *doctorLayout) {
				l.unitDropins = map[string]string{"10-user.conf": "[Service]\nUser=root\n"}
				l.host = map[string]string{kubeletUnitPath: kubeletKubeadm, "root/.docker/config.json": dockerConfig, "etc/passwd": "root:x:0:0:root:/root:/bin/bash\n"}
			}),
			wantCode: 1,
		},
		{
			name: "the kubelet with Environment=HOME=/srv/k, serve without", golden: "doctor-home-kubelet-srv.txt",
			layout: with(func(l *doctorLayout) {
				l.host = map[string]string{kubeletUnitPath: kubeletKubeadm + "Environment=HOME=/srv/k\n", "srv/k/.docker/config.json": dockerConfig}
			}),
			wantCode: 1,
		},
		{
			name: "containerd down", golden: "doctor-runtime-down.txt",
			layout: with(func(l *doctorLayout) {
				l.runtimeDown = true
				l.healthz, l.healthzCode = "image service backend unavailable", http.StatusServiceUnavailable
			}),
			wantCode: 1,
		},
		{
			name: "the kubelet's /configz: not restarted since its files changed", golden: "doctor-configz.txt",
			layout: with(func(l *doctorLayout) {
				l.configz = `{"kubeletconfig": {"containerRuntimeEndpoint": "RUNTIME", "imageServiceEndpoint": "RUNTIME", "registryPullQPS": 0, "registryBurst": 10, "serializeImagePulls": false, "maxParallelImagePulls": 10, "imagePullCredentialsVerificationPolicy": "NeverVerifyPreloadedImages"}}`
			}),
			wantCode: 1,
		},
		{
			name: "the kubelet's /configz forbidden: its files", golden: "doctor-configz-forbidden.txt",
			layout: with(func(l *doctorLayout) {
				l.configz, l.configzCode = `{"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403}`, http.StatusForbidden
			}),
			wantCode: 0,
		},
		{name: "no serve unit", golden: "doctor-no-unit.txt", layout: with(func(l *doctorLayout) { l.unit = "" }), wantCode: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newDoctorNode(t, tt.layout)
			args := tt.args
			if tt.layout.unit == "" {
				// No unit: doctor looks in a directory without one.
				args = append(args, "--serve-unit", filepath.Join(n.dir, "none", "pullguard.service"))
			}
			res := n.doctor(t, args...)
			assert.Equal(t, tt.wantCode, res.code, res.stderr)
			golden(t, tt.golden, n.normalize(res.stdout))
		})
	}
}

// stoppableRuntime serves a fake CRI image service on a unix socket until
// stop, or the end of the test.
func stoppableRuntime(t *testing.T) (endpoint string, stop func()) {
	t.Helper()
	socket := filepath.Join(shortDir(t), "containerd.sock")
	return "unix://" + socket, serveRuntimeAt(t, socket)
}

// serveRuntimeAt serves a fake CRI image service at socket, and returns
// its stop.
func serveRuntimeAt(t *testing.T, socket string) func() {
	t.Helper()
	lis, err := net.Listen("unix", socket)
	require.NoError(t, err)
	gs := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(gs, critest.NewImageService())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return gs.Stop
}

// TestDoctorAgainstRunningServe: against a real serve, the store it holds
// is no problem and its protection is read from its /healthz; with its
// runtime stopped, doctor names the runtime and never tells to stop serve.
func TestDoctorAgainstRunningServe(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		stopRuntime bool
		// restartRuntime starts the runtime again after stopping it;
		// doctor runs with doctorArgs.
		restartRuntime bool
		doctorArgs     []string
		wantCode       int
		wantLines      []string
		notWant        []string
	}{
		{name: "protecting", wantCode: 0, wantLines: []string{
			"OK       serve-protection        serve protects: ok: protecting (policy NeverVerifyPreloadedImages)",
			"is held by the running serve",
		}},
		{name: "pass-through", args: []string{"--feature-gates", "KubeletEnsureSecretPulledImages=false"}, wantCode: 1, wantLines: []string{
			"PROBLEM  serve-protection        serve is a pass-through, the protection is OFF",
			"fix: pullguard.service ExecStart: remove `--feature-gates KubeletEnsureSecretPulledImages=false`",
		}},
		{name: "runtime stopped", stopRuntime: true, wantCode: 1, wantLines: []string{
			"PROBLEM  runtime                 the container runtime does not answer on RUNTIME",
			"but cannot answer while its runtime (RUNTIME) is down",
			"PROBLEM  serve-protection        serve runs, but cannot protect or answer while its runtime (RUNTIME) is down",
			"is held by the running serve",
		}, notWant: []string{"stop the other", "does not serve", "systemctl status pullguard", "restart pullguard"}},
		{name: "runtime back, --wait", stopRuntime: true, restartRuntime: true, doctorArgs: []string{"--wait", "60s"}, wantCode: 0, wantLines: []string{
			"OK       runtime                 the container runtime answers on RUNTIME",
			"OK       serve-protection        serve protects",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortDir(t)
			runtime, stop := stoppableRuntime(t)
			d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), append([]string{"--image-service-endpoint", runtime}, tt.args...)...)
			cfg := filepath.Join(dir, "config.yaml")
			require.NoError(t, os.WriteFile(cfg, []byte(strings.NewReplacer("SERVE", "unix://"+d.socket, "RUNTIME", runtime).Replace(goodKubelet)), 0o600))
			unitFile := filepath.Join(dir, "pullguard.service")
			unitText := fmt.Sprintf("[Service]\nExecStart=/usr/local/bin/pullguard serve --listen unix://%s --root-dir %s --metrics-bind-address %s --image-service-endpoint %s --kubelet-root-dir %s %s\n",
				d.socket, d.root, d.metrics, runtime, filepath.Join(d.root, "no-kubelet"), strings.Join(tt.args, " "))
			require.NoError(t, os.WriteFile(unitFile, []byte(unitText), 0o600))
			if tt.stopRuntime {
				stop()
				// serve holds on while its runtime is away.
				code, _ := d.get(t, "/healthz")
				require.Equal(t, http.StatusServiceUnavailable, code)
			}
			if tt.restartRuntime {
				serveRuntimeAt(t, strings.TrimPrefix(runtime, "unix://"))
			}
			res := pullguardEnv(t, []string{"HOME=" + dir}, nil, append([]string{"doctor", "--kubelet-config", cfg, "--kubelet-flags-files", filepath.Join(dir, "none.env"), "--serve-unit", unitFile}, tt.doctorArgs...)...)
			out := strings.ReplaceAll(res.stdout, runtime, "RUNTIME")
			t.Logf("doctor %s:\n%s%s", strings.Join(tt.doctorArgs, " "), out, res.stderr)
			assert.Equal(t, tt.wantCode, res.code, res.stdout+res.stderr)
			for _, l := range tt.wantLines {
				assert.Contains(t, out, l)
			}
			for _, l := range tt.notWant {
				assert.NotContains(t, out, l)
			}
			require.Equal(t, 0, d.stop(t))
		})
	}
}

// TestDoctorConfigzBounded: an API server that sends more than 1 MiB, or
// does not answer within --timeout, costs doctor no more: it warns and
// reads the kubelet's files.
func TestDoctorConfigzBounded(t *testing.T) {
	store := servedStore(t)
	tests := []struct {
		name     string
		layout   doctorLayout
		wantWhat string
	}{
		{name: "more than 1 MiB", layout: doctorLayout{configz: `{"kubeletconfig": {"x": "` + strings.Repeat("a", 2<<20) + `"}}`}, wantWhat: "input too large"},
		{name: "no answer", layout: doctorLayout{configzHang: true}, wantWhat: "/api/v1/nodes/node-a/proxy/configz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.layout
			l.config, l.kubeadm, l.unit, l.healthz, l.store = goodKubelet, kubeadmEnv, goodUnit, healthzProtecting, store
			n := newDoctorNode(t, l)
			start := time.Now()
			res := n.doctor(t, "--timeout", "1s")
			assert.Less(t, time.Since(start), 20*time.Second)
			assert.Equal(t, 0, res.code, res.stdout+res.stderr)
			assert.Contains(t, res.stdout, "WARNING  kubelet-configz         the kubelet's /configz cannot be read")
			assert.Contains(t, res.stdout, tt.wantWhat)
			assert.Contains(t, res.stdout, "the kubelet accepts its configuration, read from "+n.kubeletConfig)
		})
	}
}

func TestDoctorBadOutput(t *testing.T) {
	res := pullguard(t, "doctor", "-o", "yaml")
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "--output must be text or json")
}
