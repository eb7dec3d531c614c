package kubelet

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/pullguard/pullguard/internal/bootsystemd"
	"github.com/pullguard/pullguard/pkg/nodeagent"
)

// maskedUnits are masked in a node's root: systemd-tmpfiles would empty
// /tmp at boot, where the test's directories are bind-mounted.
// D-Bus and logind are masked too: the agent reaches systemd on its
// private socket (nodeinstall.DialSystemd), as on a node without D-Bus
// (here, D-Bus's start waits for long).
var maskedUnits = []string{"systemd-tmpfiles-setup.service", "systemd-tmpfiles-clean.service", "systemd-tmpfiles-clean.timer",
	"dbus.service", "dbus.socket", "systemd-logind.service"}

// bootNodeSystem boots n's systemd (internal/bootsystemd): PID 1 of a PID
// and mount namespace of the node's own, chrooted into a copy of the
// cached Debian root. The namespace is the node's mountNS too: the
// harness's processes (containerd, serve, the kubelet it starts) enter it
// with nsenter --mount and see the host's files but for /run, /var/lib
// and /var/log, which are the root's (so the node's units and the
// harness's processes share them); the units see the root, with the
// test's directories (the control plane's and the node's, under /tmp) and
// the binaries' directories bind-mounted at their paths, and the root
// itself at hostRootInNamespace (the DaemonSet's hostPath). systemd is
// killed by its PID at the end; the namespace's mounts go with it.
func (c *cluster) bootNodeSystem(cp *cluster) *mountNS {
	t := c.t
	root := bootsystemd.NewRoot(t, "")
	for _, u := range maskedUnits {
		require.NoError(t, os.Symlink("/dev/null", filepath.Join(root, "etc", "systemd", "system", u)))
	}
	// A pod on the host's network gets the node's /etc/hosts, which
	// debootstrap does not write.
	hosts := filepath.Join(root, "etc", "hosts")
	if _, err := os.Stat(hosts); err != nil {
		require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"), 0o644))
	}
	// The node's files are under /tmp (the test's directories): serve's
	// PrivateTmp would hide them, the containerd socket among them.
	dropIn := filepath.Join(root, "etc", "systemd", "system", "pullguard.service.d", "50-e2e-tmp.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(dropIn), 0o755))
	require.NoError(t, os.WriteFile(dropIn, []byte("# The test's node keeps its files under /tmp.\n[Service]\nPrivateTmp=no\n"), 0o644))

	ns := &mountNS{shadowed: map[string]string{}}
	var b strings.Builder
	// Shared, as a node's / is: the kubelet's volume mounts, made in the
	// root, reach containerd's view, and mountPropagation works.
	b.WriteString("mount --make-rshared /\n")
	b.WriteString(`mount -t tmpfs tmpfs "$ROOT/run"` + "\n")
	b.WriteString(`mount -t tmpfs tmpfs "$ROOT/tmp"` + "\n")
	binds := []string{cp.dir, c.dir, filepath.Dir(c.bins.kubelet), c.bins.containerd, filepath.Dir(c.bins.pullguard)}
	for _, d := range binds {
		fmt.Fprintf(&b, "mkdir -p \"$ROOT\"%q && mount --bind %q \"$ROOT\"%q\n", d, d, d)
	}
	// The root with its /run, seen by the agent (the DaemonSet's hostPath).
	fmt.Fprintf(&b, "mkdir -p \"$ROOT\"%q && mount --rbind \"$ROOT\" \"$ROOT\"%q\n", hostRootInNamespace, hostRootInNamespace)
	for _, d := range shadowedDirs {
		ns.shadowed[d] = filepath.Join(root, d)
		fmt.Fprintf(&b, "mount --rbind \"$ROOT\"%q %q\n", d, d)
	}
	sd := bootsystemd.Boot(t, root, bootsystemd.Options{Setup: b.String()})
	ns.sd, ns.root = sd, root
	// /run is a tmpfs of the namespace: the host sees it through systemd's
	// root.
	ns.shadowed["/run"] = filepath.Join("/proc", fmt.Sprint(sd.PID), "root", "run")
	ns.pid = fmt.Sprint(sd.PID)
	return ns
}

// kubeletJournal is the last n lines of the kubelet's log: its unit's
// journal once systemd runs it, the harness's file before.
func (c *cluster) kubeletJournal(n int) string {
	if c.ns != nil && c.ns.sd != nil && c.ns.sd.Show(c.t, "kubelet.service", "ActiveState") != "inactive" {
		return c.ns.sd.Journal("kubelet.service", n)
	}
	return c.klOut.tail(n)
}

// startSystemdKubelet stops the harness's kubelet and starts kubelet.service
// in n's systemd from the kubeadm-shaped files of src (a root laid out by
// writeKubeadmNode) but pullguard's package's, copied into the node's
// root; it waits for the kubelet's /healthz.
func (c *cluster) startSystemdKubelet(t *testing.T, ctx context.Context, src string) {
	c.kl.stop(20 * time.Second)
	out, err := exec.CommandContext(ctx, "cp", "-a", src+"/.", c.ns.root).CombinedOutput()
	require.NoError(t, err, "cp: %s", out)
	// A node without pullguard's package: the agent puts its own binary
	// and units there.
	for _, f := range []string{"/usr/lib/systemd/system/pullguard.service", "/usr/lib/systemd/system/pullguard.socket",
		"/usr/lib/systemd/system/kubelet.service.d/20-pullguard.conf"} {
		require.NoError(t, os.Remove(filepath.Join(c.ns.root, f)))
	}
	sd := c.ns.sd
	sd.Run(t, "systemctl", "daemon-reload")
	sd.Run(t, "systemctl", "enable", "--now", "kubelet.service")
	c.awaitKubeletHealthy(t, ctx)
}

// awaitKubeletHealthy waits until kubelet.service is active and the
// kubelet answers on its /healthz.
func (c *cluster) awaitKubeletHealthy(t *testing.T, ctx context.Context) {
	err := poll(90*time.Second, 200*time.Millisecond, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.health, nil)
		if err != nil {
			return true, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("kubelet healthz: %s", resp.Status)
		}
		return true, nil
	})
	require.NoError(t, err, "%s's kubelet.service: %s", c.hostname(), c.ns.sd.Journal("kubelet.service", 30))
}

// kubeletPaths are the kubelet's files on a node: its units, drop-ins,
// flags and configuration, and its binary (not the rest of /var/lib/kubelet,
// where the kubelet keeps its sockets).
var kubeletPaths = []string{
	"/usr/lib/systemd/system/kubelet.service", "/usr/lib/systemd/system/kubelet.service.d",
	"/etc/systemd/system/kubelet.service.d", "/var/lib/kubelet/config.yaml", "/var/lib/kubelet/kubeadm-flags.env",
	"/var/lib/kubelet/config.d", "/etc/default/kubelet", "/usr/bin/kubelet",
}

// kubeletFiles are rootFiles of the kubelet's paths in root.
func kubeletFiles(t *testing.T, root string) map[string]string {
	all := map[string]string{}
	for _, p := range kubeletPaths {
		if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
			continue
		}
		for rel, v := range rootFiles(t, filepath.Join(root, p)) {
			all[strings.TrimSuffix(p+rel, "/")] = v
		}
	}
	return all
}

// perNode gives each node a DaemonSet of its own, ds's with a nodeSelector
// and a label of its own: the nodes share this machine's network
// namespace, so serve's metrics and secure ports (fixed in the
// DaemonSet's arguments) must differ per node, as the nodes' addresses
// would. The Lease, the ServiceAccount and serve's token are the same for
// all.
func perNode(t *testing.T, ds *appsv1.DaemonSet, i int, n *cluster, metricsPort int) *appsv1.DaemonSet {
	d := ds.DeepCopy()
	d.Name = fmt.Sprintf("%s-%d", ds.Name, i+1)
	const label = "pullguard-e2e/node"
	d.Spec.Selector.MatchLabels[label] = strconv.Itoa(i + 1)
	d.Spec.Template.Labels[label] = strconv.Itoa(i + 1)
	spec := &d.Spec.Template.Spec
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[corev1.LabelHostname] = n.hostname()
	c := &spec.Containers[0]
	var args []string
	for _, a := range c.Args {
		if !strings.HasPrefix(a, "--serve-arg=--secure-port=") {
			args = append(args, a)
		}
	}
	flag := func(name string) string {
		i := slices.Index(n.mode.serveArgs, name)
		require.GreaterOrEqual(t, i, 0, "%s in %s's serve arguments", name, n.hostname())
		return n.mode.serveArgs[i+1]
	}
	args = append(args,
		"--serve-arg=--secure-port="+strconv.Itoa(n.securePort), "--serve-arg=--bind-address=127.0.0.1",
		"--serve-arg=--tls-cert-file="+flag("--tls-cert-file"), "--serve-arg=--tls-private-key-file="+flag("--tls-private-key-file"),
		"--serve-arg=--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort))
	c.Args = args
	return d
}

// leaseTimes watches the agents' Lease and records when each holder took
// it (its acquireTime), by holder, until ctx ends.
func (f *fleet) leaseTimes(t *testing.T, ctx context.Context, ns string) func() map[string]time.Time {
	var mu sync.Mutex
	taken := map[string]time.Time{}
	w, err := f.cp.client.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + nodeagent.DefaultLeaseName})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || l.Spec.HolderIdentity == nil || l.Spec.AcquireTime == nil {
				continue
			}
			mu.Lock()
			if _, seen := taken[*l.Spec.HolderIdentity]; !seen {
				taken[*l.Spec.HolderIdentity] = l.Spec.AcquireTime.Time
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func() map[string]time.Time {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(taken)
	}
}

// agentLogTime is the time of the first line of p's agent's log (the CRI
// log file under the node's podLogsDir) that has text.
func (n *cluster) agentLogTime(t *testing.T, p corev1.Pod, text string) time.Time {
	logs, err := filepath.Glob(filepath.Join(n.dir, "pod-logs", p.Namespace+"_"+p.Name+"_*", "*", "*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, logs, "%s's log", p.Name)
	for _, file := range logs {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, text) {
				ts, _, _ := strings.Cut(l, " ")
				at, err := time.Parse(time.RFC3339Nano, ts)
				require.NoError(t, err, l)
				return at
			}
		}
	}
	t.Fatalf("no %q in %s's log", text, p.Name)
	return time.Time{}
}

// restartWindow is kubelet.service's last restart in n's systemd, in µs
// of CLOCK_MONOTONIC (the machine's, the same in every node): from when
// it stopped being active to when it was active again.
func (n *cluster) restartWindow(t *testing.T) (from, to uint64) {
	sd := n.ns.sd
	return sd.Monotonic(t, "kubelet.service", "ActiveExitTimestampMonotonic"), sd.Monotonic(t, "kubelet.service", "ActiveEnterTimestampMonotonic")
}

// daemonSetOnSystemd runs deploy/daemonset with the release's image on
// nodes whose kubelet runs under their own systemd (kubelet.service from
// the kubeadm-shaped files of roots): the agent takes the Lease, switches
// its node, restarts the kubelet through the node's systemd and reports
// Installed, one node at a time; the tenants' scenarios and serve's secure
// metrics then hold on every node; deleting the DaemonSet and applying
// uninstall.yaml gives every kubelet file back.
func (f *fleet) daemonSetOnSystemd(t *testing.T, ctx context.Context, roots map[*cluster]string, worlds []*world, access *metricsAccess, appImage string) {
	before := map[*cluster]map[string]string{}
	for _, n := range f.nodes {
		root := roots[n]
		require.NotEmpty(t, root)
		// The agent reads the kubelet's --kubeconfig and its CA under the
		// host's root, whose own files it sees (not the test's directories
		// bind-mounted there): they are put there, at their paths.
		for _, file := range []string{n.kubeconfig(), n.pki.caFile} {
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			dst := filepath.Join(n.ns.root, file)
			require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			require.NoError(t, os.WriteFile(dst, data, 0o600))
		}
		took := time.Now()
		n.startSystemdKubelet(t, ctx, root)
		t.Logf("%s: kubelet.service started by the node's systemd in %s", n.hostname(), time.Since(took).Round(10*time.Millisecond))
		before[n] = kubeletFiles(t, n.ns.root)
	}
	image := f.agentImage(t, ctx)
	objs := daemonSetObjects(t)
	var ds *appsv1.DaemonSet
	var others []k8sruntime.Object
	for _, o := range objs {
		if d, ok := o.(*appsv1.DaemonSet); ok {
			ds = d
		} else {
			others = append(others, o)
		}
	}
	require.NotNil(t, ds, "a DaemonSet in deploy/daemonset")
	forTheFleet(t, ds, image, f.cp.apiURL)
	var sets []k8sruntime.Object
	for i, n := range f.nodes {
		port, err := freePort()
		require.NoError(t, err)
		sets = append(sets, perNode(t, ds, i, n, port))
	}
	f.apply(t, ctx, others)
	leases := f.leaseTimes(t, ctx, ds.Namespace)
	start := time.Now()
	f.apply(t, ctx, sets)
	pods := map[string]corev1.Pod{}
	events := map[string][]string{}
	for _, o := range sets {
		p, e := f.awaitAgents(t, ctx, o.(*appsv1.DaemonSet), 1)
		maps.Copy(pods, p)
		maps.Copy(events, e)
	}
	t.Logf("the agent reported on every node %s after the manifests were applied", time.Since(start).Round(100*time.Millisecond))
	type window struct {
		node     string
		from, to uint64
	}
	var windows []window
	taken := leases()
	for _, n := range f.nodes {
		evs := events[n.hostname()]
		t.Logf("%s: the agent's events: %s", n.hostname(), strings.Join(evs, " | "))
		require.True(t, slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, nodeagent.ReasonInstalled+": ") }),
			"%s: the agent installed and restarted the kubelet through the node's systemd: %v\n%s", n.hostname(), evs, n.kubeletJournal(20))
		from, to := n.restartWindow(t)
		windows = append(windows, window{n.hostname(), from, to})
		p := pods[n.hostname()]
		installed := n.agentLogTime(t, p, `reason="Installed"`)
		var at time.Time
		for holder, tm := range taken {
			if strings.Contains(holder, n.hostname()) || strings.Contains(holder, p.Name) {
				at = tm
			}
		}
		require.False(t, at.IsZero(), "%s's agent took the Lease: holders %v", n.hostname(), taken)
		t.Logf("%s: Lease taken → Installed in %s (the kubelet's restart through systemd: %.2f s)", n.hostname(), installed.Sub(at).Round(10*time.Millisecond), float64(to-from)/1e6)
	}
	// One node at a time: the kubelets' restarts do not overlap.
	slices.SortFunc(windows, func(a, b window) int { return cmp.Compare(a.from, b.from) })
	for i := 1; i < len(windows); i++ {
		require.Less(t, windows[i-1].to, windows[i].from, "%s's kubelet was active again before %s's stopped", windows[i-1].node, windows[i].node)
	}
	for _, p := range pods {
		t.Logf("%s", podSummary(p))
	}
	err := poll(30*time.Second, time.Second, func() (bool, error) {
		for _, o := range sets {
			got, err := f.agentPods(ctx, o.(*appsv1.DaemonSet))
			if err != nil {
				return false, err
			}
			for _, p := range got {
				if _, ready := containerRunning(p); !ready {
					return false, fmt.Errorf("%s", podSummary(p))
				}
			}
		}
		return true, nil
	})
	require.NoError(t, err, "every agent ready once its node is switched")

	for i, w := range worlds {
		n := w.c
		w.step(t, fmt.Sprintf("node %d, switched by the DaemonSet: tenant B is refused", i+1), func(t *testing.T) {
			w.refused(t, on(pod(w.b.ns, "intruder-ds-"+strconv.Itoa(i+1), appImage, ifNotPresent, withSecret), n), "team-a/app", false)
		})
		w.step(t, fmt.Sprintf("node %d, switched by the DaemonSet: tenant A's first pod verifies (the store is new), its second needs no registry request", i+1), func(t *testing.T) {
			// The uninstall before the DaemonSet took serve's store with
			// it: the DaemonSet's serve starts with no record, and A's
			// present image is verified once.
			w.runs(t, on(pod(w.a.ns, "app-ds-first-"+strconv.Itoa(i+1), appImage, ifNotPresent, withSecret), n))
			w.freeRun(t, on(pod(w.a.ns, "app-ds-"+strconv.Itoa(i+1), appImage, ifNotPresent, withSecret), n))
		})
	}
	worlds[0].step(t, "every node's metrics, from the DaemonSet's serve, through the API server", func(t *testing.T) {
		f.checkSecureMetrics(t, ctx, access, false)
	})

	for _, o := range sets {
		f.deleteDaemonSet(t, ctx, o.(*appsv1.DaemonSet))
	}
	un := decodeManifests(t, filepath.Join("..", "..", "deploy", "daemonset", "uninstall.yaml"))
	require.Len(t, un, 1, "uninstall.yaml's objects")
	uds, ok := un[0].(*appsv1.DaemonSet)
	require.True(t, ok, "uninstall.yaml holds a DaemonSet")
	forTheFleet(t, uds, image, f.cp.apiURL)
	f.apply(t, ctx, un)
	_, events = f.awaitAgents(t, ctx, uds, len(f.nodes))
	for _, n := range f.nodes {
		evs := events[n.hostname()]
		t.Logf("%s: the uninstall agent's events: %s", n.hostname(), strings.Join(evs, " | "))
		require.True(t, slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, nodeagent.ReasonUninstalled+": ") }),
			"%s: uninstalled: %v", n.hostname(), evs)
		require.Equal(t, before[n], kubeletFiles(t, n.ns.root), "every kubelet file of %s as before the DaemonSet", n.hostname())
		n.awaitKubeletHealthy(t, ctx)
		flags := n.ns.sd.Run(t, "cat", "/proc/"+n.ns.sd.Show(t, "kubelet.service", "MainPID")+"/cmdline")
		// Its own command line: no --config-dir install added, no serve's
		// socket (the node's name holds "pullguard", its flags may too).
		assert.NotContains(t, flags, "--config-dir", "%s's kubelet runs on its own settings", n.hostname())
		assert.NotContains(t, flags, "pullguard.sock", "%s's kubelet runs on its own settings", n.hostname())
	}
	f.deleteDaemonSet(t, ctx, uds)
}
