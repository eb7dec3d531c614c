package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const nodeName = "pullguard-e2e-node"

// mode is one way of wiring the kubelet's image service.
type mode struct {
	name string
	// kubeletGate is the kubelet's own KubeletEnsureSecretPulledImages.
	kubeletGate bool
	// proxy puts `pullguard serve` between the kubelet and containerd.
	proxy bool
	// pullSettings are the kubelet's pull throttle and parallelism as
	// configuration lines; empty: serializeImagePulls: true and the
	// kubelet's defaults.
	pullSettings string
	// kubeletArgs and serveArgs are added to the kubelet's and serve's
	// command lines.
	kubeletArgs, serveArgs []string
	// installed starts serve with the command line of
	// deploy/systemd/pullguard.service, its paths moved under the test's
	// directory (installedServe), and gives the kubelet the install's
	// pull settings unless pullSettings says otherwise.
	installed bool
	// quietServe leaves serve at its unit's log verbosity (the
	// benchmark: serve as on a node); otherwise serve logs at -v 2.
	quietServe bool
}

// cluster is one node: etcd, kube-apiserver, a private containerd, the
// registry, optionally `pullguard serve`, and the kubelet.
type cluster struct {
	t      *testing.T
	dir    string
	mode   mode
	bins   binaries
	reg    *registry
	ctrd   *containerd
	etcd   *child
	api    *child
	apiURL string
	pg     *child
	pgOut  *output
	// pgMetrics is the host:port of pullguard serve's metrics.
	pgMetrics string
	kl        *child
	klArgs    []string
	klOut     *output
	health    string // the kubelet's healthz URL
	// kubeletPort is the port of the kubelet's authenticated server
	// (its /metrics among others).
	kubeletPort int
	client      kubernetes.Interface
	// serveLine, when set, is serve's command line (after the binary) for
	// its metrics address, in place of the test's or the shipped unit's.
	serveLine func(metrics string) []string
	// pki is the control plane's certificate authority.
	pki *pki
	// node is this node's name; empty: nodeName.
	node string
	// nodeKubeconfig is the kubelet's kubeconfig; empty: the control
	// plane's pki/node.kubeconfig, for nodeName.
	nodeKubeconfig string
	// ns is the mount namespace the node's containerd, serve and kubelet
	// run in; nil: the test's own (a node of a fleet has its own).
	ns *mountNS
	// kcm and sched are kube-controller-manager and kube-scheduler, which
	// only a fleet's control plane runs (startControllers).
	kcm, sched *child
	// securePort is serve's secure endpoint's port (0: off).
	securePort int
	// fleet is a fleet's control plane (startFleet): the API server's
	// ServiceAccount admission is on (kube-controller-manager creates
	// each namespace's default ServiceAccount and fills token Secrets;
	// the DaemonSet's pods get their token), and privileged pods are
	// allowed (--allow-privileged, as kubeadm's API server has it: the
	// DaemonSet's agent is one).
	fleet bool
}

// hostname is the node's name.
func (c *cluster) hostname() string {
	if c.node != "" {
		return c.node
	}
	return nodeName
}

// kubeconfig is the kubelet's kubeconfig.
func (c *cluster) kubeconfig() string {
	if c.nodeKubeconfig != "" {
		return c.nodeKubeconfig
	}
	return filepath.Join(c.dir, "pki", "node.kubeconfig")
}

// startCluster brings the node up; everything it starts is stopped by
// t.Cleanup, in reverse order, even when the test fails.
func startCluster(t *testing.T, ctx context.Context, m mode, bins binaries, preload func(*cluster)) *cluster {
	t.Helper()
	skipUnsupported(t, m, bins.kubeletRelease)
	c := newCluster(t, m, bins)
	c.startRegistry(ctx)

	var err error
	c.ctrd, err = startContainerd(ctx, c.mkdir("containerd"), bins.containerd, nil)
	require.NoError(t, err)
	t.Cleanup(c.ctrd.stop)
	require.NoError(t, importSandbox(ctx, c.dir, c.ctrd, bins.pauseBytes))
	if preload != nil {
		preload(c)
	}

	c.startEtcd(ctx)
	c.startAPIServer(ctx)
	c.writeKubeletConfig()
	if m.proxy {
		c.startPullguard(ctx)
	}
	c.startKubelet(ctx)
	return c
}

// newCluster makes the node's directory, removed at the end unless the
// test failed (or PULLGUARD_E2E_KEEP is set), every mount under it undone.
func newCluster(t *testing.T, m mode, bins binaries) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "pgk-") // short: unix socket paths are limited to 108 bytes
	require.NoError(t, err)
	c := &cluster{t: t, dir: dir, mode: m, bins: bins}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("PULLGUARD_E2E_KEEP") != "" {
			t.Logf("logs and state kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	// The kubelet bind-mounts its root directory onto itself (to make it
	// rshared); undo every mount under dir once everything has stopped.
	t.Cleanup(func() { unmountUnder(t, dir) })
	return c
}

// startRegistry starts the registry with its admin account.
func (c *cluster) startRegistry(ctx context.Context) {
	var err error
	c.reg, err = startRegistry(ctx, c.mkdir("registry"))
	require.NoError(c.t, err)
	c.t.Cleanup(c.reg.close)
	c.reg.setUser(adminUser, newSecret("admin"))
}

func (c *cluster) mkdir(name string) string {
	p := filepath.Join(c.dir, name)
	require.NoError(c.t, os.MkdirAll(p, 0o755))
	return p
}

func (c *cluster) startEtcd(ctx context.Context) {
	t := c.t
	client, err := freePort()
	require.NoError(t, err)
	peer, err := freePort()
	require.NoError(t, err)
	out, err := newOutput(filepath.Join(c.dir, "etcd.log"))
	require.NoError(t, err)
	clientURL, peerURL := "http://127.0.0.1:"+strconv.Itoa(client), "http://127.0.0.1:"+strconv.Itoa(peer)
	c.etcd, err = spawn(out, nil, "etcd", "--name", "e2e", "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e="+peerURL)
	require.NoError(t, err)
	// Registered before the apiserver's: cleanups run last-in first-out,
	// and the apiserver hangs on SIGTERM once etcd is gone.
	t.Cleanup(func() { c.etcd.stop(10 * time.Second) })
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, out.await(wait, 0, "ready to serve client requests"), out.tail(20))
	c.etcd.name = clientURL
}

func (c *cluster) startAPIServer(ctx context.Context) {
	t := c.t
	p, err := newPKI(filepath.Join(c.dir, "pki"))
	require.NoError(t, err)
	c.pki = p
	serving, servingKey, err := p.issue("apiserver", "kube-apiserver", nil, true)
	require.NoError(t, err)
	saKey, err := p.serviceAccountKey()
	require.NoError(t, err)
	port, err := freePort()
	require.NoError(t, err)
	c.apiURL = "https://127.0.0.1:" + strconv.Itoa(port)
	out, err := newOutput(filepath.Join(c.dir, "kube-apiserver.log"))
	require.NoError(t, err)
	args := []string{
		"--etcd-servers", c.etcd.name,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--tls-cert-file", serving, "--tls-private-key-file", servingKey,
		"--client-ca-file", p.caFile, "--anonymous-auth=false",
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--service-account-issuer", "https://pullguard-e2e.invalid", "--service-account-key-file", saKey,
		"--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", "10.96.0.0/24",
		"--endpoint-reconciler-type", "none",
		"--cert-dir", filepath.Join(c.dir, "pki", "apiserver"),
	}
	if c.fleet {
		args = append(args, "--allow-privileged=true")
	} else {
		// No controller manager creates the default service accounts.
		args = append(args, "--disable-admission-plugins", "ServiceAccount")
	}
	if c.bins.apiserverRelease.minor >= imageVolumeDigestMinor {
		// The API server keeps an image volume's
		// volumeStatus.image.imageRef only under this gate (alpha; it
		// drops the field otherwise). A kubelet without the gate sets
		// no such field, so only the step that turns it on in the
		// kubelet sees a difference.
		args = append(args, "--feature-gates", "ImageVolumeWithDigest=true")
	}
	c.api, err = spawn(out, nil, c.bins.apiserver, args...)
	require.NoError(t, err)
	t.Cleanup(func() { c.api.stop(20 * time.Second) })

	adminCert, adminKey, err := p.issue("admin", "pullguard-e2e-admin", []string{"system:masters"}, false)
	require.NoError(t, err)
	adminKC, err := p.kubeconfig("admin", c.apiURL, adminCert, adminKey)
	require.NoError(t, err)
	nodeCert, nodeKey, err := p.issue("node", "system:node:"+c.hostname(), []string{"system:nodes"}, false)
	require.NoError(t, err)
	_, err = p.kubeconfig("node", c.apiURL, nodeCert, nodeKey)
	require.NoError(t, err)

	rc, err := clientcmd.BuildConfigFromFlags("", adminKC)
	require.NoError(t, err)
	// No client-side throttle: the benchmarks create many pods at once,
	// and a request held in the client would count as the node's time.
	rc.QPS = -1
	c.client, err = kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	err = poll(60*time.Second, 100*time.Millisecond, func() (bool, error) {
		if c.api.exited() {
			return true, fmt.Errorf("kube-apiserver exited")
		}
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", err
	})
	require.NoError(t, err, out.tail(30))
}

// startPullguard runs `pullguard serve` in front of containerd.
func (c *cluster) startPullguard(ctx context.Context) {
	t := c.t
	if c.pgOut == nil {
		var err error
		c.pgOut, err = newOutput(filepath.Join(c.dir, "pullguard.log"))
		require.NoError(t, err)
	}
	out := c.pgOut
	socket := c.pgSocket()
	port, err := freePort()
	require.NoError(t, err)
	metrics := "127.0.0.1:" + strconv.Itoa(port)
	c.pgMetrics = metrics
	args := []string{"serve",
		"--listen", "unix://" + socket,
		"--image-service-endpoint", "unix://" + c.ctrd.socket,
		"--root-dir", filepath.Join(c.dir, "pullguard"),
		"--kubelet-root-dir", filepath.Join(c.dir, "kubelet"),
		"--config", filepath.Join(c.dir, "kubelet-config.yaml"),
		// The kubelet's own gate is off in its configuration; pullguard's
		// is on.
		"--feature-gates", "KubeletEnsureSecretPulledImages=true",
		// Given by flag: a kubelet whose gate is off refuses the field.
		"--image-pull-credentials-verification-policy", "NeverVerifyPreloadedImages",
		// The images baked into the node before pullguard was installed
		// are preloaded ones, as the kubelet treats images it has no
		// record of.
		"--unrecorded-images", "preloaded",
		"--metrics-bind-address", metrics,
		// Never the node's /run/pullguard/admin.sock.
		"--admin-socket", filepath.Join(c.dir, "pg-admin.sock"),
		"-v", "2"}
	if c.mode.installed {
		args = c.installedServe(metrics)
	}
	if c.serveLine != nil {
		args = c.serveLine(metrics)
	}
	// containerd's registry hosts directory is the test's (a node's is
	// /etc/containerd/certs.d, serve's default).
	args = append(args, "--registry-config-path", c.ctrd.hosts)
	name, args := c.ns.command(c.bins.pullguard, append(args, c.mode.serveArgs...)...)
	c.pg, err = spawn(out, nil, name, args...)
	require.NoError(t, err)
	pg := c.pg
	t.Cleanup(func() { pg.stop(15 * time.Second) })
	err = poll(30*time.Second, 50*time.Millisecond, func() (bool, error) {
		if pg.exited() {
			return true, fmt.Errorf("pullguard serve exited")
		}
		if _, err := os.Stat(socket); err != nil {
			return false, err
		}
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("pullguard /healthz: %s", resp.Status)
		}
		return true, nil
	})
	require.NoError(t, err, out.tail(30))
}

// installedServe is serve's command line in deploy/systemd/pullguard.service,
// with each of its paths and addresses moved to this node's.
func (c *cluster) installedServe(metrics string) []string {
	t := c.t
	unit, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "pullguard.service"))
	require.NoError(t, err)
	var line string
	for _, l := range strings.Split(strings.ReplaceAll(string(unit), "\\\n", " "), "\n") {
		if rest, ok := strings.CutPrefix(l, "ExecStart="); ok {
			line = rest
		}
	}
	words := strings.Fields(line)
	require.GreaterOrEqual(t, len(words), 2, "ExecStart in pullguard.service")
	require.Equal(t, []string{"/usr/bin/pullguard", "serve"}, words[:2])
	moved := map[string]string{
		"--listen":                 "unix://" + c.pgSocket(),
		"--image-service-endpoint": "unix://" + c.ctrd.socket,
		"--root-dir":               filepath.Join(c.dir, "pullguard"),
		"--config":                 filepath.Join(c.dir, "kubelet-config.yaml"),
		"--kubelet-root-dir":       filepath.Join(c.dir, "kubelet"),
		"--metrics-bind-address":   metrics,
	}
	// The unit leaves --admin-socket at its default, the node's
	// /run/pullguard/admin.sock: this node's is under the test's directory.
	args := []string{"serve", "--admin-socket", filepath.Join(c.dir, "pg-admin.sock")}
	for i := 2; i < len(words); i++ {
		flag, value, inline := strings.Cut(words[i], "=")
		if !inline && i+1 < len(words) && !strings.HasPrefix(words[i+1], "--") {
			i++
			value = words[i]
		}
		if v, ok := moved[flag]; ok {
			value = v
		} else {
			// A new flag with a path or an address of the real node
			// must be moved here too.
			require.False(t, strings.HasPrefix(value, "/") || strings.HasPrefix(value, "unix://") || strings.Contains(value, "127.0.0.1"),
				"pullguard.service's %s %s: move it under the test's directory in installedServe", flag, value)
		}
		if value == "" && !inline {
			args = append(args, flag) // a boolean flag
			continue
		}
		args = append(args, flag, value)
	}
	if c.mode.quietServe {
		return args
	}
	return append(args, "-v", "2")
}

func (c *cluster) pgSocket() string { return filepath.Join(c.dir, "pg.sock") }

func (c *cluster) writeKubeletConfig() {
	t := c.t
	port, err := freePort()
	require.NoError(t, err)
	hport, err := freePort()
	require.NoError(t, err)
	c.health = "http://127.0.0.1:" + strconv.Itoa(hport) + "/healthz"
	c.kubeletPort = port
	imageService := "unix://" + c.ctrd.socket
	// The kubelet refuses the policy field when its gate is off.
	policy := ""
	if c.mode.kubeletGate {
		policy = "imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages\n"
	}
	if c.mode.proxy {
		imageService = "unix://" + c.pgSocket()
	}
	pulls := c.mode.pullSettings
	if c.mode.installed && pulls == "" {
		// What the install's snippet sets, with the kubelet's gate as
		// the mode says.
		pulls = installPullSettings(t)
	}
	if pulls == "" {
		pulls = "serializeImagePulls: true\n"
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
%s%scontainerRuntimeEndpoint: %q
imageServiceEndpoint: %q
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: %q}}
authorization: {mode: AlwaysAllow}
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
evictionHard: {}
evictionSoft: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: %q
registerNode: true
%ssyncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
`, c.kubeletFeatureGates(), policy, "unix://"+c.ctrd.socket, imageService, port, hport,
		c.pki.caFile, c.mkdir("pod-logs"), pulls)
	path := filepath.Join(c.dir, "kubelet-config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	c.klArgs = []string{
		"--config", path,
		"--kubeconfig", c.kubeconfig(),
		"--root-dir", c.mkdir("kubelet"),
		"--cert-dir", c.mkdir("kubelet-pki"),
		"--hostname-override", c.hostname(),
		"--node-ip", "127.0.0.1",
		"-v", "2",
	}
	c.klArgs = append(c.klArgs, c.mode.kubeletArgs...)
	var err2 error
	c.klOut, err2 = newOutput(filepath.Join(c.dir, "kubelet.log"))
	require.NoError(t, err2)
}

func (c *cluster) startKubelet(ctx context.Context) {
	t := c.t
	var err error
	name, args := c.ns.command(c.bins.kubelet, c.klArgs...)
	c.kl, err = spawn(c.klOut, nil, name, args...)
	require.NoError(t, err)
	kl := c.kl
	t.Cleanup(func() { kl.stop(20 * time.Second) })
	err = poll(60*time.Second, 100*time.Millisecond, func() (bool, error) {
		if kl.exited() {
			return true, fmt.Errorf("the kubelet exited")
		}
		resp, err := http.Get(c.health)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("kubelet healthz: %s", resp.Status)
		}
		_, err = c.client.CoreV1().Nodes().Get(ctx, c.hostname(), metav1.GetOptions{})
		return err == nil, err
	})
	require.NoError(t, err, c.klOut.tail(40))
	// The kubelet only logs a configuration field it does not know.
	require.False(t, c.kubeletLogHas("strict decoding failed"), "the kubelet ignored part of kubelet-config.yaml; see %s", c.klOut.file.Name())
}

// restartKubelet stops the kubelet by its PID and starts it again on the
// same root directory.
func (c *cluster) restartKubelet(ctx context.Context) {
	c.kl.stop(20 * time.Second)
	c.startKubelet(ctx)
}

// restartKubeletWith restarts the kubelet with extra added to its command
// line for this run only (none: as configured), e.g. a feature gate,
// which the kubelet merges with its file's featureGates.
func (c *cluster) restartKubeletWith(ctx context.Context, extra ...string) {
	base := c.klArgs
	c.klArgs = append(slices.Clip(base), extra...)
	defer func() { c.klArgs = base }()
	c.restartKubelet(ctx)
}

// restartPullguard stops `pullguard serve` by its PID and starts it again
// on the same root directory; the kubelet reconnects to its socket.
func (c *cluster) restartPullguard(ctx context.Context) {
	c.pg.stop(15 * time.Second)
	c.startPullguard(ctx)
}

// switchMode puts the node in mode m: the kubelet (and serve, if it runs)
// stop by their PIDs, the kubelet's configuration is written for m, and
// serve (in a mode with it) and the kubelet start again on the same root
// directories. containerd, the registry, etcd and the API server stay.
func (c *cluster) switchMode(ctx context.Context, m mode) {
	c.kl.stop(20 * time.Second)
	if c.pg != nil {
		c.pg.stop(15 * time.Second)
		c.pg = nil
	}
	c.mode = m
	c.writeKubeletConfig()
	if m.proxy {
		c.startPullguard(ctx)
	}
	c.startKubelet(ctx)
}

// kubeletLogHas reports whether the kubelet logged a line with text.
func (c *cluster) kubeletLogHas(text string) bool {
	for _, l := range c.klOut.from(0) {
		if strings.Contains(l, text) {
			return true
		}
	}
	return false
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("read mountinfo: %v", err)
		return
	}
	var points []string
	for _, line := range strings.Split(string(info), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		if err := syscall.Unmount(p, 0); err != nil {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				t.Errorf("unmount %s: %v", p, err)
			}
		}
	}
}
