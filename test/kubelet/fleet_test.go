package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The fleet's nodes.
var fleetNodes = []string{"pullguard-e2e-node-1", "pullguard-e2e-node-2"}

// fleetLock keeps two fleets apart. A fleet does not take the machine's
// lock (machineLock): each of its nodes runs in a mount namespace of its
// own, so it touches none of the host's fixed paths, and it can run while
// the single-node tests run.
const fleetLock = "pullguard-e2e-fleet.lock"

// TestFleet: one control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) and two nodes on this machine,
// each run by a real systemd booted as PID 1 of the node's own PID and
// mount namespaces (bootNodeSystem: the kubelet's fixed paths under
// /var/lib/kubelet, /var/log and containerd's under /run are the node's),
// with its own containerd and kubelet, all on 127.0.0.1.
// `pullguard install --host-root` is run in each node's namespace on a
// kubeadm-shaped root (as TestInstallOnTheKubelet does on one node), and
// the harness restarts its kubelet from the root's files: the stand-in for
// `--restart-kubelet` in these steps (see docs/testing.md). Then, on every
// node, tenant B is refused and tenant A's second pod needs no registry
// request; A's pod scheduled on node 2 after A pulled on node 1 is
// verified there (records are per node); every node's serve is scraped on
// its secure endpoint through the API server's authentication and
// authorization (401, 403, 200); `pullguard uninstall` gives every kubelet
// file back. Last, deploy/daemonset runs with the release's image on both
// nodes' systemd (daemonSetOnSystemd): the agents switch the nodes one at
// a time, the scenarios and the metrics pass on the switched nodes, and
// its uninstall mode gives every kubelet file back; with
// PULLGUARD_E2E_FLEET_NO_SYSTEMD=1, on roots no systemd answers for
// instead (daemonSetWithoutSystemd: each agent rolls its node back).
//
// It runs with `make e2e-fleet` (PULLGUARD_E2E_FLEET=1, as root).
func TestFleet(t *testing.T) {
	if os.Getenv("PULLGUARD_E2E_FLEET") != "1" {
		t.Skip("the fleet runs with `make e2e-fleet` (PULLGUARD_E2E_FLEET=1, as root)")
	}
	suite := time.Now()
	bins, podLogs := prepareLocked(t, fleetLock)
	if bins.pullguard == "" {
		t.Skip("skipped: " + bins.noServe)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	var appImage string
	start := time.Now()
	f := startFleet(t, ctx, bins, func(cp *cluster) {
		cp.reg.grant("alice", "team-a/")
		cp.reg.grant("carol", "team-a/")
		cp.reg.grant("bob", "team-b/")
		i, err := image(bins.pauseBytes, "app")
		require.NoError(t, err)
		appImage, err = push(ctx, cp.reg, i, "team-a/app", "v1")
		require.NoError(t, err)
	})
	t.Logf("control plane and %d nodes up in %s", len(f.nodes), time.Since(start).Round(10*time.Millisecond))
	n1, n2 := f.nodes[0], f.nodes[1]
	w1 := twoTenants(t, ctx, n1, podLogs)
	var err error
	w1.tc, err = n1.newTenant(ctx, "team-c", "carol")
	require.NoError(t, err)
	for _, ns := range []string{w1.a.ns, w1.b.ns, w1.tc.ns} {
		require.NoError(t, awaitDefaultServiceAccount(ctx, n1, ns))
	}
	// The tenants are the cluster's; each node has its own world.
	w2 := &world{ctx: ctx, c: n2, a: w1.a, b: w1.b, tc: w1.tc}
	a, b, tc := w1.a, w1.b, w1.tc

	w1.step(t, "the nodes' fixed paths are their own", func(t *testing.T) {
		// The kubelet's device-plugin socket and containerd's shim
		// directory are at fixed paths: each node's are in its own
		// directory.
		for _, n := range f.nodes {
			_, err := os.Stat(filepath.Join(n.ns.shadowed["/var/lib"], "kubelet", "device-plugins", "kubelet.sock"))
			assert.NoError(t, err, "%s's kubelet's device-plugin socket in its own /var/lib", n.hostname())
			assert.DirExists(t, filepath.Join(n.ns.shadowed["/run"], "containerd"), "%s's containerd's /run/containerd", n.hostname())
		}
	})

	access := f.setUpSecureMetrics(t, ctx)
	roots := map[*cluster]string{}
	before := map[*cluster]map[string]string{}
	own := map[*cluster][]string{}
	for _, n := range f.nodes {
		w1.step(t, "pullguard install --host-root in "+n.hostname()+"'s namespace", func(t *testing.T) {
			took := time.Now()
			roots[n], before[n], own[n] = installInNamespace(t, ctx, n)
			t.Logf("%s: install and the kubelet's restart onto serve took %s", n.hostname(), time.Since(took).Round(10*time.Millisecond))
		})
	}
	require.Len(t, roots, len(f.nodes), "pullguard installed on every node")

	w1.step(t, "node 1: tenant A pulls its private image through serve", func(t *testing.T) {
		from := w1.mark(t)
		w1.runs(t, on(pod(a.ns, "app-1", appImage, ifNotPresent, withSecret), n1))
		tr := w1.since(t, from, "team-a/app")
		assert.Positive(t, tr.manifestOK)
		assert.Positive(t, tr.blobs, "the layers came down")
	})
	for i, w := range []*world{w1, w2} {
		n := w.c
		if i == 1 {
			w.step(t, "node 2: tenant C pulls tenant A's image there first", func(t *testing.T) {
				from := w.mark(t)
				w.runs(t, on(pod(tc.ns, "app-c", appImage, ifNotPresent, withSecret), n))
				tr := w.since(t, from, "team-a/app")
				assert.Positive(t, tr.blobs, "the layers came down to node 2")
			})
			w.step(t, "node 2: tenant A's pod is verified there, though A pulled on node 1", func(t *testing.T) {
				from := w.mark(t)
				w.runs(t, on(pod(a.ns, "app-on-2", appImage, ifNotPresent, withSecret), n))
				tr := w.since(t, from, "team-a/app")
				assert.Equal(t, 1, tr.manifestOK, "one manifest request granted: serve on node 2 verified A (records are per node)")
				assert.Zero(t, tr.blobs, "no layer: the image was on node 2")
				t.Logf("tenant A's first pod on node 2: %d manifest requests granted, %d refused (the token challenge), %d blobs", tr.manifestOK, tr.manifestDenied, tr.blobs)
			})
		}
		w.step(t, fmt.Sprintf("node %d: tenant B is refused", i+1), func(t *testing.T) {
			w.refused(t, on(pod(b.ns, "intruder-"+strconv.Itoa(i+1), appImage, ifNotPresent, withSecret), n), "team-a/app", false)
			w.neverPulled(t, on(pod(b.ns, "intruder-never-"+strconv.Itoa(i+1), appImage, never, noSecret), n))
		})
		w.step(t, fmt.Sprintf("node %d: tenant A's second pod needs no registry request", i+1), func(t *testing.T) {
			w.freeRun(t, on(pod(a.ns, "app-again-"+strconv.Itoa(i+1), appImage, ifNotPresent, withSecret), n))
		})
	}
	w1.step(t, "every node's metrics through the API server's authentication and authorization", func(t *testing.T) {
		f.checkSecureMetrics(t, ctx, access, true)
	})
	for _, n := range f.nodes {
		w1.step(t, "pullguard uninstall --host-root on "+n.hostname()+" gives its kubelet's files back", func(t *testing.T) {
			require.Contains(t, roots, n)
			name, args := n.ns.command(bins.pullguard, "uninstall", "--host-root", roots[n])
			out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Equal(t, before[n], rootFiles(t, roots[n]), "every file of the root as before install")
			args2 := n.kubeletFromRoot(t, roots[n])
			assert.Equal(t, own[n], args2, "the kubelet's command line as before install")
			n.klArgs = args2
			n.restartKubelet(ctx)
			n.pg.stop(15 * time.Second)
		})
	}
	w1.step(t, "the DaemonSet: the release's image from the test's registry switches every node through its systemd, one at a time; its uninstall mode gives every node back", func(t *testing.T) {
		if os.Getenv("PULLGUARD_E2E_FLEET_NO_SYSTEMD") == "1" {
			// The agent on roots no systemd answers for: it rolls back.
			f.daemonSetWithoutSystemd(t, ctx, roots)
			return
		}
		f.daemonSetOnSystemd(t, ctx, roots, []*world{w1, w2}, access, appImage)
	})
	t.Logf("TestFleet took %s", time.Since(suite).Round(10*time.Millisecond))
}

// installInNamespace lays out n's kubelet as kubeadm does under a root of
// its own (writeKubeadmNode), restarts the kubelet from it, runs
// `pullguard install --host-root` in n's namespace, starts serve from the
// drop-in install wrote, and restarts the kubelet on what install wrote.
// It returns the root, its files before install and the kubelet's command
// line before install.
func installInNamespace(t *testing.T, ctx context.Context, n *cluster) (string, map[string]string, []string) {
	root := n.mkdir("host")
	writeKubeadmNode(t, n, root, n.bins.kubelet)
	before := rootFiles(t, root)
	ownArgs := n.kubeletFromRoot(t, root)
	n.klArgs = ownArgs
	n.restartKubelet(ctx)

	name, args := n.ns.command(n.bins.pullguard, "install", "--host-root", root)
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	require.NoError(t, err, "pullguard install on %s: %s", n.hostname(), out)
	n.serveLine = n.serveFromDropIn(t, root)
	n.startPullguard(ctx)
	n.klArgs = n.kubeletFromRoot(t, root)
	n.restartKubelet(ctx)
	return root, before, ownArgs
}

// on leaves pod p to the scheduler, for node n only (its hostname label),
// tolerating every taint: the nodes have no pod network, so the node
// lifecycle controller taints them not-ready; the pods use the host's.
func on(p *corev1.Pod, n *cluster) *corev1.Pod {
	p.Spec.NodeName = ""
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.hostname()}
	p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	return p
}

// fleet is a control plane and its nodes.
type fleet struct {
	cp    *cluster
	nodes []*cluster
}

// startFleet starts the registry (preload publishes the images), etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, then a node
// for each of fleetNodes. Everything is stopped by its PID at the end, the
// nodes before the control plane.
func startFleet(t *testing.T, ctx context.Context, bins binaries, preload func(*cluster)) *fleet {
	t.Helper()
	cp := newCluster(t, mode{name: "fleet"}, bins)
	cp.fleet = true
	cp.startRegistry(ctx)
	if preload != nil {
		preload(cp)
	}
	cp.startEtcd(ctx)
	cp.startAPIServer(ctx)
	cp.startControllers(ctx)
	f := &fleet{cp: cp}
	for _, name := range fleetNodes {
		f.nodes = append(f.nodes, cp.addNode(ctx, name, mode{name: "install"}))
	}
	return f
}

// startControllers starts kube-controller-manager and kube-scheduler on
// 127.0.0.1, built as the kubelet is, of the API server's release, and
// waits for their /healthz.
func (c *cluster) startControllers(ctx context.Context) {
	t := c.t
	dir := buildCommands(t, c.bins.apiserverRelease, []string{"kube-controller-manager", "kube-scheduler"}, nil)
	start := func(name string, extra ...string) *child {
		cert, key, err := c.pki.issue(name, "system:"+name, []string{"system:masters"}, false)
		require.NoError(t, err)
		kc, err := c.pki.kubeconfig(name, c.apiURL, cert, key)
		require.NoError(t, err)
		serving, servingKey, err := c.pki.issue(name+"-serving", name, nil, true)
		require.NoError(t, err)
		port, err := freePort()
		require.NoError(t, err)
		out, err := newOutput(filepath.Join(c.dir, name+".log"))
		require.NoError(t, err)
		args := append([]string{
			"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
			"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
			"--tls-cert-file", serving, "--tls-private-key-file", servingKey,
			"--leader-elect=false",
		}, extra...)
		p, err := spawn(out, nil, filepath.Join(dir, name), args...)
		require.NoError(t, err)
		// Stopped before the API server (cleanups run last-in first-out).
		t.Cleanup(func() { p.stop(15 * time.Second) })
		ca, err := os.ReadFile(c.pki.caFile)
		require.NoError(t, err)
		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(ca))
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
		defer client.CloseIdleConnections()
		err = poll(60*time.Second, 200*time.Millisecond, func() (bool, error) {
			if p.exited() {
				return true, fmt.Errorf("%s exited", name)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", nil)
			if err != nil {
				return true, err
			}
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, fmt.Errorf("%s /healthz: %s", name, resp.Status)
			}
			return true, nil
		})
		require.NoError(t, err, out.tail(30))
		return p
	}
	c.kcm = start("kube-controller-manager",
		"--service-account-private-key-file", filepath.Join(c.dir, "pki", "sa.key"),
		"--root-ca-file", c.pki.caFile, "--use-service-account-credentials=false")
	c.sched = start("kube-scheduler")
}

// addNode starts a node of the control plane c: its own directory and
// mount namespace (mountNS), containerd, and kubelet named name,
// registered with its own certificate.
func (c *cluster) addNode(ctx context.Context, name string, m mode) *cluster {
	t := c.t
	n := newCluster(t, m, c.bins)
	n.node, n.reg, n.apiURL, n.client, n.pki = name, c.reg, c.apiURL, c.client, c.pki
	// Booted first: it ends after every process of the node.
	n.ns = n.bootNodeSystem(c)
	cert, key, err := c.pki.issue("node-"+name, "system:node:"+name, []string{"system:nodes"}, false)
	require.NoError(t, err)
	n.nodeKubeconfig, err = c.pki.kubeconfig("node-"+name, c.apiURL, cert, key)
	require.NoError(t, err)
	n.ctrd, err = startContainerd(ctx, n.mkdir("containerd"), c.bins.containerd, n.ns)
	require.NoError(t, err)
	t.Cleanup(n.ctrd.stop)
	require.NoError(t, importSandbox(ctx, n.dir, n.ctrd, c.bins.pauseBytes))
	n.writeKubeletConfig()
	if m.proxy {
		n.startPullguard(ctx)
	}
	n.startKubelet(ctx)
	return n
}

// metricsAccess is what the nodes' secure metrics need: serve's own
// identity (a ServiceAccount's kubeconfig, bound to system:auth-delegator
// and extension-apiserver-authentication-reader) and the tokens of two
// clients, one bound to a ClusterRole that may get /metrics, one bound to
// nothing.
type metricsAccess struct {
	serveKubeconfig  string
	reader, stranger string
}

// setUpSecureMetrics creates the ServiceAccounts and RBAC objects, and
// gives each node's serve the flags of its secure endpoint on a port of
// its own (on 127.0.0.1, with a serving certificate of the test's CA).
func (f *fleet) setUpSecureMetrics(t *testing.T, ctx context.Context) *metricsAccess {
	cp := f.cp
	cs := cp.client
	for _, ns := range []string{"pullguard-system", "monitoring"} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	token := func(ns, name string) string {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
		hour := int64(3600)
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	subject := func(ns, name string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}
	}
	// serve's identity, as the DaemonSet provisions it.
	serveToken := token("pullguard-system", "pullguard-serve")
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pullguard-serve:auth-delegator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   subject("pullguard-system", "pullguard-serve"),
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pullguard-serve:authentication-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   subject("pullguard-system", "pullguard-serve"),
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	kc := filepath.Join(cp.dir, "pki", "pullguard-serve.kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: e2e, user: {token: %q}}]
contexts: [{name: e2e, context: {cluster: e2e, user: e2e}}]
current-context: e2e
`, cp.apiURL, cp.pki.caFile, serveToken)), 0o600))

	// The scraper's ClusterRole, bound to one client only.
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "pullguard-metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus:pullguard-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pullguard-metrics-reader"},
		Subjects:   subject("monitoring", "prometheus"),
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	access := &metricsAccess{serveKubeconfig: kc, reader: token("monitoring", "prometheus"), stranger: token("monitoring", "stranger")}

	for _, n := range f.nodes {
		port, err := freePort()
		require.NoError(t, err)
		n.securePort = port
		cert, key, err := cp.pki.issue("serve-"+n.hostname(), n.hostname(), nil, true)
		require.NoError(t, err)
		n.mode.serveArgs = append(n.mode.serveArgs, "--secure-port", strconv.Itoa(port), "--bind-address", "127.0.0.1",
			"--tls-cert-file", cert, "--tls-private-key-file", key,
			"--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc)
	}
	return access
}

// secureGet is GET path on n's secure endpoint with token (none: ""): its
// status and body, read up to 4 MiB.
func (n *cluster) secureGet(ctx context.Context, path, token string) (int, string, error) {
	ca, err := os.ReadFile(n.pki.caFile)
	if err != nil {
		return 0, "", err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(n.securePort)+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(body), err
}

// awaitDefaultServiceAccount waits until kube-controller-manager has made
// the namespace's default ServiceAccount, which the ServiceAccount
// admission plugin requires of every pod.
func awaitDefaultServiceAccount(ctx context.Context, c *cluster, ns string) error {
	return poll(60*time.Second, 100*time.Millisecond, func() (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// checkSecureMetrics checks every node's serve's secure endpoint: /metrics
// answers 401 with no token, 403 to a ServiceAccount bound to nothing, 200
// to one bound to nonResourceURLs /metrics; /healthz needs no token; with
// harnessLog, neither token is in the log of the serve the harness runs
// (else, in pullguard.service's journal in the node's systemd).
func (f *fleet) checkSecureMetrics(t *testing.T, ctx context.Context, access *metricsAccess, harnessLog bool) {
	for _, n := range f.nodes {
		for _, c := range []struct {
			who, token string
			status     int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"a ServiceAccount with no RBAC rule", access.stranger, http.StatusForbidden},
			{"a ServiceAccount bound to nonResourceURLs /metrics", access.reader, http.StatusOK},
		} {
			status, body, err := n.secureGet(ctx, "/metrics", c.token)
			require.NoError(t, err, "%s's secure /metrics", n.hostname())
			assert.Equal(t, c.status, status, "%s's /metrics, %s: %s", n.hostname(), c.who, lastBytes([]byte(body), 300))
			if c.status == http.StatusOK {
				assert.Contains(t, body, "pullguard_criproxy_requests_total", "%s's serve's metrics", n.hostname())
			}
		}
		status, _, err := n.secureGet(ctx, "/healthz", "")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, status, "%s's /healthz needs no token", n.hostname())
		logs := n.pgOut.from(0)
		if !harnessLog {
			logs = strings.Split(n.ns.sd.Journal("pullguard.service", 0), "\n")
		}
		for _, l := range logs {
			for _, tok := range []string{access.reader, access.stranger} {
				require.NotContains(t, l, tok, "a token in %s's serve log", n.hostname())
			}
		}
	}
}
