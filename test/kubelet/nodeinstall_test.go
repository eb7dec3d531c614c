package kubelet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// TestInstallOnTheKubelet: `pullguard install --host-root` on a scratch root
// that holds this node's kubelet as the harness runs it, the way kubeadm
// lays it out: the kubelet package's kubelet.service, kubeadm's
// 10-kubeadm.conf drop-in, kubeadm-flags.env, /etc/default/kubelet and
// /var/lib/kubelet/config.yaml (with comments and an operator's own key),
// and pullguard's package (its units under /usr/lib/systemd/system). No
// systemd runs here, so the harness does what `--restart-kubelet` asks
// systemd to do: it restarts the kubelet with the flags nodeinstall.Discover
// reads from the root's unit and flags files, and starts serve with the
// command line of the drop-in install wrote. The kubelet then runs on
// serve: tenant B's Never pod of tenant A's image gets ErrImageNeverPull,
// tenant A's second pod runs with no registry request. `pullguard
// uninstall` gives every file of the root back byte for byte, and the
// kubelet restarted on them runs pods with serve stopped.
//
// The root holds the files install reads and writes, at the node's paths;
// the kubelet's other files (its root directory, kubeconfig and
// certificates) stay in the harness's directory, named by their real
// paths, which install copies into serve's drop-in and nothing else.
func TestInstallOnTheKubelet(t *testing.T) {
	bins, podLogs := prepare(t)
	if bins.pullguard == "" {
		t.Skip("skipped: " + bins.noServe)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	var appImage string
	c := startCluster(t, ctx, mode{name: "install"}, bins, func(c *cluster) {
		c.reg.grant("alice", "team-a/")
		c.reg.grant("bob", "team-b/")
		i, err := image(bins.pauseBytes, "app")
		require.NoError(t, err)
		appImage, err = push(ctx, c.reg, i, "team-a/app", "v1")
		require.NoError(t, err)
	})
	w := twoTenants(t, ctx, c, podLogs)
	a, b := w.a, w.b
	root := c.mkdir("host")
	writeKubeadmNode(t, c, root, bins.kubelet)
	before := rootFiles(t, root)
	var ownArgs []string

	w.step(t, "the kubelet runs from the root's unit, flags files and config.yaml", func(t *testing.T) {
		ownArgs = c.kubeletFromRoot(t, root)
		c.klArgs = ownArgs
		c.restartKubelet(ctx)
	})
	w.step(t, "pullguard install --host-root", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, bins.pullguard, "install", "--host-root", root).CombinedOutput()
		require.NoError(t, err, "%s", out)
		t.Logf("pullguard install:\n%s", out)
		// A kubelet 1.36 with no --config-dir gets one, in the flags file
		// kubeadm never rewrites; config.yaml is left as it is. The
		// package's units are used, not written again.
		assert.Regexp(t, `(?m)^modify +/etc/default/kubelet:`, string(out))
		assert.Regexp(t, `(?m)^create +`+nodeinstall.DefaultConfigDir+`/`+nodeinstall.KubeletDropIn+`:`, string(out))
		assert.Regexp(t, `(?m)^create +`+nodeinstall.ServeDropIn+`:`, string(out))
		assert.NotRegexp(t, `(?m)^create +/etc/systemd/system/pullguard\.(service|socket):`, string(out))
		now := rootFiles(t, root)
		assert.Equal(t, before["/var/lib/kubelet/config.yaml"], now["/var/lib/kubelet/config.yaml"])

		out, err = exec.CommandContext(ctx, bins.pullguard, "install", "--host-root", root).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "nothing to change")
		assert.Equal(t, now, rootFiles(t, root), "a second install wrote nothing")
	})
	w.step(t, "the kubelet restarted on what install wrote, serve started from its drop-in", func(t *testing.T) {
		args := c.kubeletFromRoot(t, root)
		assert.Contains(t, args, "--config-dir="+filepath.Join(root, nodeinstall.DefaultConfigDir))
		c.serveLine = c.serveFromDropIn(t, root)
		c.startPullguard(ctx)
		c.klArgs = args
		c.restartKubelet(ctx)
	})
	w.step(t, "tenant A pulls its private image through serve", func(t *testing.T) {
		from := w.mark(t)
		w.runs(t, pod(a.ns, "app-1", appImage, ifNotPresent, withSecret))
		tr := w.since(t, from, "team-a/app")
		assert.Positive(t, tr.manifestOK)
		assert.Positive(t, tr.blobs, "the layers came down")
	})
	w.step(t, "tenant B's Never pod of tenant A's image gets ErrImageNeverPull", func(t *testing.T) {
		w.neverPulled(t, pod(b.ns, "intruder-never", appImage, never, noSecret))
	})
	w.step(t, "tenant A's second pod runs with no registry request", func(t *testing.T) {
		w.freeRun(t, pod(a.ns, "app-2", appImage, ifNotPresent, withSecret))
	})
	w.step(t, "the kubelet asked serve", func(t *testing.T) {
		for _, method := range []string{"PullImage", "ImageStatus", "ImageFsInfo"} {
			n, err := c.serveMetric(ctx, "pullguard_criproxy_requests_total", map[string]string{"method": method})
			require.NoError(t, err)
			assert.Positive(t, n, "serve's %s calls", method)
		}
		log := c.pgOut.from(0)
		for _, p := range []string{"team-a/app-1", "team-a/app-2"} {
			key := `pod="` + p + `"`
			assert.True(t, slices.ContainsFunc(log, func(l string) bool { return strings.Contains(l, key) }), "no line for %s in serve's log", p)
		}
	})
	w.step(t, "pullguard uninstall --host-root gives the root back byte for byte", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, bins.pullguard, "uninstall", "--host-root", root).CombinedOutput()
		require.NoError(t, err, "%s", out)
		t.Logf("pullguard uninstall:\n%s", out)
		assert.Equal(t, before, rootFiles(t, root))
	})
	w.step(t, "the kubelet restarted on its own settings runs pods with serve stopped", func(t *testing.T) {
		// What `uninstall --restart-kubelet` asks systemd: the kubelet
		// restarted, then serve stopped.
		args := c.kubeletFromRoot(t, root)
		assert.Equal(t, ownArgs, args, "the kubelet's command line as before install")
		c.klArgs = args
		c.restartKubelet(ctx)
		c.pg.stop(15 * time.Second)
		assert.Equal(t, before, rootFiles(t, root), "serve's exit wrote nothing under the root")
		w.freeRun(t, pod(a.ns, "app-3", appImage, ifNotPresent, withSecret))
	})
	t.Logf("TestInstallOnTheKubelet took %s", time.Since(start).Round(10*time.Millisecond))
}

// kubeadmUnit is the kubelet package's kubelet.service; kubeadm's drop-in
// gives its command line.
const kubeadmUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`

// writeKubeadmNode writes under root this node's kubelet as kubeadm lays it
// out, from the harness's command line (c.klArgs) and configuration file,
// and pullguard's package: its units under /usr/lib/systemd/system, serve's
// socket moved into the test's directory (the kubelet's image service is
// what install writes from it). /usr/bin/kubelet is the kubelet built for
// the test, which install asks for its version.
func writeKubeadmNode(t *testing.T, c *cluster, root, kubelet string) {
	flags := map[string]nodeinstall.Flag{}
	nodeinstall.ParseFlags(c.klArgs, "", 0, flags)
	cfg, err := os.ReadFile(flags[nodeinstall.FlagConfig].Value)
	require.NoError(t, err)
	// kubeadm's file leaves the image service to the runtime's endpoint;
	// install refuses one that is not serve's.
	var kept []string
	for _, l := range strings.SplitAfter(string(cfg), "\n") {
		if !strings.HasPrefix(l, "imageServiceEndpoint:") {
			kept = append(kept, l)
		}
	}
	require.Len(t, kept, len(strings.SplitAfter(string(cfg), "\n"))-1, "one imageServiceEndpoint line in the harness's configuration")
	config := "# The kubelet's configuration; kubeadm writes it from the cluster's\n" +
		"# kubelet-config ConfigMap.\n" +
		strings.Replace(strings.Join(kept, ""), "syncFrequency:", "# The operator's own, kept by install.\ncontainerLogMaxSize: 5Mi # per container\nsyncFrequency:", 1)
	// Once the kubelet has a --config-dir, it merges its file and the
	// drop-ins as JSON of the versioned type, whose omitempty drops an
	// empty list or map, and defaults what is missing: its file's
	// `enforceNodeAllocatable: []` becomes [pods] (refused with
	// cgroupsPerQOS: false) and `evictionHard: {}` the default
	// thresholds. The same settings, spelled so that they survive it.
	for old, same := range map[string]string{
		"enforceNodeAllocatable: []\n": "enforceNodeAllocatable: [none]\n",
		"evictionHard: {}\n":           "evictionHard: {memory.available: 1Ki} # the thresholds not given are 0\n",
	} {
		require.Equal(t, 1, strings.Count(config, old), "%q in the harness's configuration", old)
		config = strings.Replace(config, old, same, 1)
	}

	var kubeadmArgs []string
	for _, name := range flagNames(flags) {
		if name != nodeinstall.FlagConfig && name != "kubeconfig" {
			kubeadmArgs = append(kubeadmArgs, "--"+name+"="+flags[name].Value)
		}
	}
	deployed := func(name string) string {
		data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", name))
		require.NoError(t, err)
		return string(data)
	}
	moveSocket := func(unit string) string {
		require.Equal(t, 1, strings.Count(unit, "/run/pullguard/pullguard.sock"))
		return strings.Replace(unit, "/run/pullguard/pullguard.sock", c.pgSocket(), 1)
	}
	files := map[string]string{
		"/usr/lib/systemd/system/kubelet.service": kubeadmUnit,
		"/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": `# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--kubeconfig=` + flags["kubeconfig"].Value + `"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`,
		"/var/lib/kubelet/kubeadm-flags.env":                          `KUBELET_KUBEADM_ARGS="` + strings.Join(kubeadmArgs, " ") + "\"\n",
		"/etc/default/kubelet":                                        "KUBELET_EXTRA_ARGS=\n",
		"/var/lib/kubelet/config.yaml":                                config,
		"/usr/lib/systemd/system/pullguard.service":                   moveSocket(deployed("pullguard.service")),
		"/usr/lib/systemd/system/pullguard.socket":                    moveSocket(deployed("pullguard.socket")),
		"/usr/lib/systemd/system/kubelet.service.d/20-pullguard.conf": deployed("kubelet-pullguard.conf"),
	}
	for p, data := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(data), 0o644))
	}
	// A link to it would be resolved under the root, as install resolves
	// every link: the binary itself, hard-linked (copied when the module
	// cache is on another file system).
	bin := filepath.Join(root, "usr", "bin", "kubelet")
	require.NoError(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	if err := os.Link(kubelet, bin); err != nil {
		data, err := os.ReadFile(kubelet)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(bin, data, 0o755))
	}

	// The root gives the harness's kubelet: its flags, its file at the
	// node's path.
	k, err := nodeinstall.Discover(root)
	require.NoError(t, err)
	want := flagValues(flags)
	want[nodeinstall.FlagConfig] = "/var/lib/kubelet/config.yaml"
	require.Equal(t, want, flagValues(k.Flags))
}

// kubeletFromRoot is the kubelet's command line as root's unit and flags
// files give it, read by nodeinstall.Discover: its flags, the files of the
// root (--config and --config-dir) at their paths under it.
func (c *cluster) kubeletFromRoot(t *testing.T, root string) []string {
	k, err := nodeinstall.Discover(root)
	require.NoError(t, err)
	require.Equal(t, "/usr/bin/kubelet", k.Binary)
	var args []string
	for _, name := range flagNames(k.Flags) {
		v := k.Flag(name)
		if name == nodeinstall.FlagConfig || name == nodeinstall.FlagConfigDir {
			v = filepath.Join(root, v)
		}
		args = append(args, "--"+name+"="+v)
	}
	return args
}

// serveFromDropIn is serve's command line from the ExecStart of the drop-in
// install wrote under root: /usr/bin/pullguard is the test's build; the
// paths of the node's files (serve's store, the kubelet's --config and
// --config-dir) are under root, and its metrics address the test's; every
// other value is required to be the harness's own (the socket the
// package's unit gives, containerd's, the kubelet's root directory) or to
// be no path. The unit leaves --admin-socket at the node's default: it is
// moved into the test's directory; -v 2 logs serve's calls.
func (c *cluster) serveFromDropIn(t *testing.T, root string) func(metrics string) []string {
	data, err := os.ReadFile(filepath.Join(root, nodeinstall.ServeDropIn))
	require.NoError(t, err)
	opts, err := unit.DeserializeOptions(bytes.NewReader(data))
	require.NoError(t, err)
	var line string
	for _, o := range opts {
		if o.Section == "Service" && o.Name == "ExecStart" {
			line = o.Value
		}
	}
	words, err := nodeinstall.SplitCommandLine(line)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(words), 2, "ExecStart in %s", nodeinstall.ServeDropIn)
	require.Equal(t, []string{"/usr/bin/pullguard", "serve"}, words[:2])
	underRoot := map[string]bool{"--root-dir": true, "--config": true, "--config-dir": true}
	same := map[string]string{
		"--listen":                 "unix://" + c.pgSocket(),
		"--image-service-endpoint": "unix://" + c.ctrd.socket,
		"--kubelet-root-dir":       filepath.Join(c.dir, "kubelet"),
	}
	return func(metrics string) []string {
		args := []string{"serve", "--admin-socket", filepath.Join(c.dir, "pg-admin.sock"), "-v", "2"}
		seen := map[string]bool{}
		for i := 2; i < len(words); i++ {
			flag, value := words[i], ""
			require.True(t, strings.HasPrefix(flag, "--"), "%s: %q", nodeinstall.ServeDropIn, flag)
			if i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
				i++
				value = words[i]
			}
			seen[flag] = true
			switch {
			case underRoot[flag]:
				value = filepath.Join(root, value)
			case flag == "--metrics-bind-address":
				value = metrics
			case same[flag] != "":
				require.Equal(t, same[flag], value, "%s in %s", flag, nodeinstall.ServeDropIn)
			default:
				require.False(t, strings.HasPrefix(value, "/") || strings.HasPrefix(value, "unix://") || strings.Contains(value, "127.0.0.1"),
					"%s's %s %s: move it under the test's directory in serveFromDropIn", nodeinstall.ServeDropIn, flag, value)
			}
			args = append(args, flag)
			if value != "" {
				args = append(args, value)
			}
		}
		for flag := range same {
			require.True(t, seen[flag], "%s in %s", flag, nodeinstall.ServeDropIn)
		}
		require.True(t, seen["--config-dir"], "--config-dir in %s", nodeinstall.ServeDropIn)
		return args
	}
}

// rootFiles is every file, directory and link under root: its mode and
// content (a large file's hash, a link's target).
func rootFiles(t *testing.T, root string) map[string]string {
	tree := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			tree[rel] = "link " + target
		case d.IsDir():
			tree[rel] = info.Mode().String()
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if len(data) > 64<<10 { // the kubelet's binary
				tree[rel] = fmt.Sprintf("%s sha256:%x", info.Mode(), sha256.Sum256(data))
				break
			}
			tree[rel] = info.Mode().String() + "\n" + string(data)
		}
		return nil
	})
	require.NoError(t, err)
	return tree
}

func flagNames(flags map[string]nodeinstall.Flag) []string {
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func flagValues(flags map[string]nodeinstall.Flag) map[string]string {
	v := map[string]string{}
	for n, f := range flags {
		v[n] = f.Value
	}
	return v
}
