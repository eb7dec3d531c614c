// Package systemd_test runs pullguard under a real systemd, PID 1 of its own
// PID and mount namespace, booted from a Debian root made by debootstrap:
// the release's .deb installed with dpkg, the shipped units' socket
// activation, readiness and sandbox with a credential-provider plugin, and
// `pullguard install` and `uninstall --restart-kubelet` on a kubeadm-style
// kubelet (a stand-in that checks its image service as the kubelet does).
// Run it with `make e2e-systemd` (PULLGUARD_E2E_SYSTEMD=1, as root); see
// docs/testing.md.
package systemd_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/bootsystemd"
	"github.com/pullguard/pullguard/internal/debpkg"
)

// The node's files, as the units name them.
const (
	serveSocket   = "/run/pullguard/pullguard.sock"
	runtimeSocket = "/run/containerd/containerd.sock"
	// containerdEndpoint is the kubelet's runtime, as kubeadm writes it
	// (/var/run is /run).
	containerdEndpoint = "unix:///var/run/containerd/containerd.sock"
	pluginBinDir       = "/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec"
	providerCfg        = "/etc/kubernetes/credential-provider.yaml"
	// nodeConfig is the node's docker credentials where kubeadm's kubelet
	// reads them: its root directory. It has no HOME under systemd (its
	// unit has no User=), so it never reads /root/.docker/config.json.
	nodeConfig = "/var/lib/kubelet/config.json"
)

func TestRealSystemd(t *testing.T) {
	if os.Getenv("PULLGUARD_E2E_SYSTEMD") != "1" {
		t.Skip("the real-systemd suite runs with `make e2e-systemd` (PULLGUARD_E2E_SYSTEMD=1, as root)")
	}
	require.Zero(t, os.Geteuid(), "the real-systemd suite boots systemd in namespaces: it needs root")
	for _, tool := range []string{"debootstrap", "unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			install(t, "debootstrap")
		}
	}
	suiteStart := time.Now()
	start := time.Now()
	root := bootsystemd.NewRoot(t, "")
	t.Logf("root ready in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	deb := releaseDeb(t)
	t.Logf("%s built by tools/release in %s", filepath.Base(deb), time.Since(start).Round(time.Millisecond))
	report := pluginReports(t)
	installNode(t, root, deb, report.Addr().String())

	start = time.Now()
	sd := bootsystemd.Boot(t, root, bootsystemd.Options{})
	t.Logf("systemd booted in %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { t.Logf("the suite took %s", time.Since(suiteStart).Round(time.Second)) })

	sd.Run(t, "systemctl", "start", "containerd.service")

	if !t.Run("package", func(t *testing.T) {
		out := sd.Run(t, "dpkg", "-i", "/var/tmp/"+filepath.Base(deb))
		t.Logf("dpkg -i: %s", out)
		files := strings.Split(sd.Run(t, "dpkg", "-L", "pullguard"), "\n")
		for _, f := range []string{
			"/usr/bin/pullguard",
			"/usr/lib/systemd/system/pullguard.service",
			"/usr/lib/systemd/system/pullguard.socket",
			"/usr/share/pullguard/kubelet-pullguard.conf",
			"/usr/share/pullguard/config-snippet.yaml",
		} {
			assert.Contains(t, files, f)
			sd.Run(t, "test", "-f", f)
		}
		for _, f := range files {
			assert.False(t, strings.HasPrefix(f, "/etc/"), "the package installs nothing under /etc: %s", f)
		}
		assert.Contains(t, sd.Run(t, "pullguard", "--version"), releaseVersion)
		// The package enabled and started nothing.
		for _, u := range []string{"pullguard.socket", "pullguard.service"} {
			assert.Equal(t, "disabled", sd.IsEnabled(u), u)
			assert.Equal(t, "inactive", sd.Show(t, u, "ActiveState"), u)
		}
		_, err := sd.Try("test", "-e", "/etc/systemd/system/kubelet.service.d/20-pullguard.conf")
		assert.Error(t, err, "the package puts no drop-in into the kubelet's unit")
		_, err = sd.Try("test", "-e", serveSocket)
		assert.Error(t, err, "no socket before the operator starts one")
		// The operator starts serve by hand in the next steps (docs/serve.md
		// "The units"): systemd reads the package's units.
		sd.Run(t, "systemctl", "daemon-reload")
	}) {
		t.FailNow()
	}

	t.Run("socket activation", func(t *testing.T) {
		sd.Run(t, "systemctl", "start", "pullguard.socket")
		assert.Equal(t, "inactive", sd.Show(t, "pullguard.service", "ActiveState"), "the socket alone starts no serve")
		assert.Equal(t, "srw-rw---- root root", sd.Run(t, "stat", "-c", "%A %U %G", serveSocket), "SocketMode=0660, root's")
		// A client's connection starts serve; it is answered.
		assert.Equal(t, "OK", sd.Run(t, "/usr/local/bin/fakecri", "fsinfo", serveSocket))
		assert.Equal(t, "active", sd.Show(t, "pullguard.service", "ActiveState"))
		assert.Contains(t, sd.Run(t, "journalctl", "-u", "pullguard.service", "-o", "cat"), "socketFromSystemd=true")
	})

	t.Run("READY", func(t *testing.T) {
		// Type=notify: systemctl start returns once serve said READY=1
		// (StatusText is serve's STATUS= after it).
		assert.Equal(t, "notify", sd.Show(t, "pullguard.service", "Type"))
		assert.Equal(t, "-999", sd.Show(t, "pullguard.service", "OOMScoreAdjust"))
		sd.Run(t, "systemctl", "stop", "pullguard.service")
		sd.Run(t, "test", "-S", serveSocket) // systemd's socket stays
		sd.Run(t, "systemctl", "start", "pullguard.service")
		assert.Equal(t, "running", sd.Show(t, "pullguard.service", "SubState"))
		assert.Equal(t, "Serving on unix://"+serveSocket, sd.Show(t, "pullguard.service", "StatusText"))

		// No READY while the runtime is down: the start fails, and
		// serve is started again (Restart=always) until it answers.
		// (Masked: serve's Wants= would start it again.)
		sd.Run(t, "systemctl", "stop", "containerd.service")
		sd.Run(t, "systemctl", "mask", "--runtime", "containerd.service")
		_, err := sd.Try("systemctl", "restart", "pullguard.service")
		assert.Error(t, err, "a start with the runtime down does not succeed: %s", sd.Run(t, "journalctl", "-u", "pullguard.service", "-o", "cat", "-n", "20"))
		assert.Equal(t, "activating", sd.Show(t, "pullguard.service", "ActiveState"))
		assert.Equal(t, "auto-restart", sd.Show(t, "pullguard.service", "SubState"))
		sd.Run(t, "systemctl", "unmask", "--runtime", "containerd.service")
		sd.Run(t, "systemctl", "start", "containerd.service")
		sd.Run(t, "systemctl", "start", "pullguard.service")
		assert.Equal(t, "active", sd.Show(t, "pullguard.service", "ActiveState"))

		// A restart of containerd leaves serve running (Wants=, not Requires=).
		pid := sd.Show(t, "pullguard.service", "MainPID")
		sd.Run(t, "systemctl", "restart", "containerd.service")
		assert.Equal(t, "active", sd.Show(t, "pullguard.service", "ActiveState"))
		assert.Equal(t, pid, sd.Show(t, "pullguard.service", "MainPID"))

		// Killed, serve comes back.
		restarts := sd.Show(t, "pullguard.service", "NRestarts")
		sd.Run(t, "systemctl", "kill", "--kill-whom=main", "--signal=KILL", "pullguard.service")
		sd.Run(t, "systemctl", "start", "pullguard.service")
		assert.NotEqual(t, pid, sd.Show(t, "pullguard.service", "MainPID"))
		assert.NotEqual(t, restarts, sd.Show(t, "pullguard.service", "NRestarts"))
	})

	t.Run("stop", func(t *testing.T) {
		sd.Run(t, "systemctl", "stop", "pullguard.service")
		assert.Contains(t, sd.Run(t, "journalctl", "-u", "pullguard.service", "-o", "cat"), "Stopped")
		sd.Run(t, "test", "-S", serveSocket)
		sd.Run(t, "systemctl", "stop", "pullguard.socket")
		_, err := sd.Try("test", "-e", serveSocket)
		assert.Error(t, err, "stopping the socket unit removes the socket")
	})

	// The kubelet, before the install, on its runtime.
	sd.Run(t, "systemctl", "start", "kubelet.service")
	waitKubelet(t, sd, containerdEndpoint)
	before := kubeletFiles(t, root)
	// What $HOME the kubelet has, started by systemd (no User=): where
	// it searches $HOME/.docker for the node's credentials.
	environ := sd.Run(t, "cat", "/proc/"+sd.Show(t, "kubelet.service", "MainPID")+"/environ")
	home := "unset"
	for _, kv := range strings.Split(environ, "\x00") {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	t.Logf("the kubelet's $HOME under systemd: %s", home)
	assert.Equal(t, "unset", home, "kubeadm's kubelet unit has no User=: systemd gives it no HOME")

	if !t.Run("install", func(t *testing.T) {
		// D-Bus is masked: install reaches systemd at its private socket.
		_, err := sd.Try("test", "-e", "/run/dbus/system_bus_socket")
		require.Error(t, err, "no system bus in the booted root")
		sd.Run(t, "test", "-S", "/run/systemd/private")
		start := time.Now()
		out, err := sd.Try("pullguard", "install", "--restart-kubelet")
		require.NoError(t, err, "pullguard install --restart-kubelet: %s\nserve: %s\nkubelet: %s", out,
			sd.Journal("pullguard.service", 30), sd.Journal("kubelet.service", 10))
		t.Logf("pullguard install --restart-kubelet took %s:\n%s", time.Since(start).Round(time.Millisecond), lastLines(out, 3))
		assert.Contains(t, out, "the kubelet restarted onto serve")
		for _, u := range []string{"pullguard.socket", "pullguard.service"} {
			assert.Equal(t, "enabled", sd.IsEnabled(u), u)
			assert.Equal(t, "active", sd.Show(t, u, "ActiveState"), u)
		}
		// The kubelet now asks serve, and serve sees its calls.
		waitKubelet(t, sd, "unix://"+serveSocket)
		metrics := serveMetrics(t)
		assert.Equal(t, "0", metrics["pullguard_criproxy_silent"], "serve is not silent")
		last, err := strconv.ParseFloat(metrics["pullguard_criproxy_last_request_timestamp_seconds"], 64)
		require.NoError(t, err, "pullguard_criproxy_last_request_timestamp_seconds: %v", metrics)
		assert.WithinDuration(t, time.Now(), time.Unix(int64(last), 0), 30*time.Second, "serve's last image service call is the kubelet's, seconds ago")

		out, err = sd.Try("pullguard", "doctor")
		assert.NoError(t, err, "pullguard doctor: %s", out)
		t.Logf("pullguard doctor:\n%s", out)
		assert.Contains(t, out, "serve can read the node's credentials the kubelet reads, "+nodeConfig)
		// serve, as the kubelet, has no HOME (its unit has no User=, and
		// install gives it none: the kubelet has none): it searches the
		// node's credentials where the kubelet does, not in /root/.docker.
		serveHome := "unset"
		for _, kv := range strings.Split(sd.Run(t, "cat", "/proc/"+sd.Show(t, "pullguard.service", "MainPID")+"/environ"), "\x00") {
			if v, ok := strings.CutPrefix(kv, "HOME="); ok {
				serveHome = v
			}
		}
		assert.Equal(t, home, serveHome, "serve's $HOME is the kubelet's")
		// serve holds its store: records can only answer through serve's
		// admin socket.
		out, err = sd.Try("pullguard", "records", "-o", "json")
		assert.NoError(t, err, "pullguard records: %s", out)
		assert.NotContains(t, sd.Journal("pullguard.service", 0), "Failed to serve the admin socket")
		assert.Equal(t, "srw------- root root", sd.Run(t, "stat", "-c", "%A %U %G", "/run/pullguard/admin.sock"), "the admin socket: mode 0600, root's")
	}) {
		t.FailNow()
	}

	t.Run("sandbox", func(t *testing.T) {
		// A pull with a credential: serve looks the node's credentials up
		// beside it, which runs the plugin (given to serve by install, from
		// the kubelet's flags), inside serve's sandbox.
		assert.Equal(t, "NotFound", sd.Run(t, "/usr/local/bin/fakecri", "pull", serveSocket, "registry.example/app:1", "tenant", "tenant-pw-e2e"))
		select {
		case line := <-report.lines:
			// The node keyring asks for the image's repository.
			assert.Equal(t, "ran uid=0 node-config=readable etc=read-only image=registry.example/app", line)
		case <-time.After(60 * time.Second):
			t.Fatalf("the plugin never reported; serve's journal:\n%s", sd.Journal("pullguard.service", 0))
		}
		// serve's own mount namespace: the node's docker config readable,
		// /root read-only, its state directory writable.
		pid := sd.Show(t, "pullguard.service", "MainPID")
		inServe := func(args ...string) error {
			_, err := sd.Try(append([]string{"nsenter", "-t", pid, "-m", "-r", "-w", "--"}, args...)...)
			return err
		}
		require.NoError(t, inServe("test", "-x", "/usr/local/bin/fakecri"), "in the booted root, not the host's")
		assert.NoError(t, inServe("test", "-r", nodeConfig), "serve sees %s", nodeConfig)
		assert.Error(t, inServe("touch", "/root/e2e-write"), "/root is read-only to serve")
		assert.Error(t, inServe("touch", "/var/lib/kubelet/e2e-write"), "the kubelet's root directory is read-only to serve")
		assert.NoError(t, inServe("touch", "/var/lib/pullguard/e2e-write"), "serve's state directory is writable")
		journal := sd.Journal("pullguard.service", 0)
		assert.NotContains(t, journal, "could not be read", "serve read the node's docker config")
		assert.NotContains(t, journal, "tenant-pw-e2e")
		assert.NotContains(t, journal, "node-pw-e2e")

		out := sd.Run(t, "systemd-analyze", "security", "pullguard.service")
		m := regexp.MustCompile(`Overall exposure level for pullguard\.service: ([0-9.]+) (\S+)`).FindStringSubmatch(out)
		require.NotNil(t, m, out)
		score, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		assert.LessOrEqual(t, score, 4.0)
		t.Logf("systemd-analyze security, online: %s %s", m[1], m[2])
	})

	t.Run("boot order", func(t *testing.T) {
		// As at boot: serve down, the kubelet started. Its Wants= starts
		// serve in the same transaction and After= holds the kubelet until
		// serve's READY=1, so its start-up check passes at once.
		sd.Run(t, "systemctl", "stop", "pullguard.service")
		oldServe := sd.Show(t, "pullguard.service", "InvocationID")
		sd.Run(t, "systemctl", "restart", "kubelet.service")
		assert.Equal(t, "active", sd.Show(t, "pullguard.service", "ActiveState"), "the kubelet's start started serve")
		assert.NotEqual(t, oldServe, sd.Show(t, "pullguard.service", "InvocationID"))
		ready := sd.Monotonic(t, "pullguard.service", "ActiveEnterTimestampMonotonic")
		serveStart := sd.Monotonic(t, "pullguard.service", "ExecMainStartTimestampMonotonic")
		kubeletStart := sd.Monotonic(t, "kubelet.service", "ExecMainStartTimestampMonotonic")
		assert.Greater(t, ready, serveStart)
		assert.GreaterOrEqual(t, kubeletStart, ready, "the kubelet started after serve's READY=1")
		t.Logf("serve started, READY %s later, the kubelet %s after READY", time.Duration(ready-serveStart)*time.Microsecond, time.Duration(kubeletStart-ready)*time.Microsecond)
		waitKubelet(t, sd, "unix://"+serveSocket)
	})

	t.Run("uninstall", func(t *testing.T) {
		out, err := sd.Try("pullguard", "uninstall", "--restart-kubelet")
		require.NoError(t, err, "pullguard uninstall --restart-kubelet: %s", out)
		t.Logf("pullguard uninstall --restart-kubelet:\n%s", lastLines(out, 2))
		assert.Equal(t, before, kubeletFiles(t, root), "the kubelet's files and units are back byte for byte")
		waitKubelet(t, sd, containerdEndpoint)
		for _, u := range []string{"pullguard.socket", "pullguard.service"} {
			assert.Equal(t, "disabled", sd.IsEnabled(u), u)
			assert.Equal(t, "inactive", sd.Show(t, u, "ActiveState"), u)
		}
	})
}

// install installs Debian packages with apt-get.
func install(t *testing.T, pkgs ...string) {
	t.Helper()
	require.NoError(t, debpkg.Install(pkgs...))
}

// releaseVersion is the version of the package the suite builds.
const releaseVersion = "v0.0.0-e2e"

// releaseDeb builds the release's .deb for this machine's architecture
// with tools/release, as `make release` does, and returns its path.
func releaseDeb(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	dist := filepath.Join(t.TempDir(), "dist")
	cmd := exec.Command("go", "run", ".", "-C", repo, "-version", releaseVersion, "-dist", dist, "-arch", runtime.GOARCH)
	cmd.Dir = filepath.Join(repo, "tools/release")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "tools/release: %s", bootsystemd.Tail(out))
	debs, err := filepath.Glob(filepath.Join(dist, "pullguard_*_"+runtime.GOARCH+".deb"))
	require.NoError(t, err)
	require.Len(t, debs, 1, "tools/release: %s", out)
	return debs[0]
}

// installNode puts into root a kubeadm node for the package to be
// installed on: the .deb in /var/tmp; containerd.service, a fake CRI
// runtime at containerd's socket; the kubelet stand-in
// (testdata/kubelet) as /usr/bin/kubelet with the files kubeadm and the
// kubelet's package write (pkg/nodeinstall's testdata/kubeadm: the unit,
// 10-kubeadm.conf, /etc/default/kubelet, config.yaml with comments and an
// operator's keys), its kubeadm-flags.env naming a credential-provider
// plugin; a node credential in the kubelet's root directory; and the plugin
// with its configuration.
func installNode(t *testing.T, root, deb, reportAddr string) {
	t.Helper()
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	build := func(pkg, to string) {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(root, to), pkg)
		cmd.Dir, cmd.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", pkg, out)
	}
	build("./test/systemd/testdata/fakecri", "usr/local/bin/fakecri")
	build("./test/systemd/testdata/kubelet", "usr/bin/kubelet")
	build("./test/systemd/testdata/plugin", strings.TrimPrefix(pluginBinDir, "/")+"/e2e-plugin")

	write := func(path string, data []byte, mode os.FileMode) {
		p := filepath.Join(root, path)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, data, mode))
	}
	data, err := os.ReadFile(deb)
	require.NoError(t, err)
	write("var/tmp/"+filepath.Base(deb), data, 0o644)

	kubeadm := filepath.Join(repo, "pkg/nodeinstall/testdata/kubeadm")
	require.NoError(t, filepath.WalkDir(kubeadm, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(kubeadm, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		write(rel, data, 0o644)
		return nil
	}))
	write("var/lib/kubelet/kubeadm-flags.env", []byte(`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=`+containerdEndpoint+
		` --pod-infra-container-image=registry.k8s.io/pause:3.10 --image-credential-provider-config=`+providerCfg+
		` --image-credential-provider-bin-dir=`+pluginBinDir+`"`+"\n"), 0o644)

	// Units a node has that do not start here (D-Bus and logind fail
	// without inotify instances to spare) would hold the boot for their
	// start timeouts; systemctl needs neither, and pullguard install
	// reaches systemd at its private socket.
	for _, u := range []string{"dbus.service", "dbus.socket", "systemd-logind.service"} {
		p := filepath.Join(root, "etc/systemd/system", u)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.Symlink("/dev/null", p))
	}

	write("usr/lib/systemd/system/containerd.service", []byte(`[Unit]
Description=a fake CRI runtime at containerd's socket
[Service]
ExecStart=/usr/local/bin/fakecri serve `+runtimeSocket+`
`), 0o644)

	auth := base64.StdEncoding.EncodeToString([]byte("node:node-pw-e2e"))
	write(strings.TrimPrefix(nodeConfig, "/"), []byte(`{"auths":{"node.example":{"auth":"`+auth+`"}}}`), 0o600)

	write(strings.TrimPrefix(providerCfg, "/"), []byte(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: e2e-plugin
  matchImages: ["registry.example"]
  defaultCacheDuration: 0s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env:
  - {name: REPORT_ADDR, value: "`+reportAddr+`"}
  - {name: NODE_CONFIG, value: "`+nodeConfig+`"}
  - {name: NODE_USER, value: node}
  - {name: NODE_PASSWORD, value: node-pw-e2e}
`), 0o644)
}

// kubeletFiles are the SHA-256 of each file, and the target of each
// symbolic link, where install writes and the kubelet's files are: what
// uninstall must give back.
func kubeletFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, dir := range []string{"etc/default", "etc/kubernetes", "etc/systemd/system", "var/lib/kubelet", "usr/lib/systemd/system/kubelet.service.d", "usr/lib/systemd/system/kubelet.service"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				files[strings.TrimPrefix(p, root)] = "-> " + target
			case d.Type().IsRegular():
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				sum := sha256.Sum256(data)
				files[strings.TrimPrefix(p, root)] = hex.EncodeToString(sum[:])
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Contains(t, files, "/var/lib/kubelet/config.yaml")
	return files
}

// serveMetrics reads serve's /metrics (the unit's --metrics-bind-address,
// in the host's network namespace, which the suite shares): each
// unlabelled sample's value by name.
func serveMetrics(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:10264/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	samples := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if name, value, ok := strings.Cut(sc.Text(), " "); ok && !strings.HasPrefix(name, "#") && !strings.Contains(name, "{") {
			samples[name] = value
		}
	}
	require.NoError(t, sc.Err())
	return samples
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// reports are the lines the plugin sends.
type reports struct {
	net.Listener
	lines chan string
}

func pluginReports(t *testing.T) *reports {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	r := &reports{Listener: l, lines: make(chan string, 16)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				r.lines <- strings.TrimSpace(line)
			}
			c.Close()
		}
	}()
	return r
}

// waitKubelet waits until the running kubelet stand-in's start-up check
// (its first ImageFsInfo) passed at endpoint, following its journal; it
// fails at once when that check failed, or was answered elsewhere.
func waitKubelet(t *testing.T, sd *bootsystemd.System, endpoint string) {
	t.Helper()
	require.Equal(t, "active", sd.Show(t, "kubelet.service", "ActiveState"), "kubelet.service: %s", sd.Journal("kubelet.service", 10))
	pid := sd.Show(t, "kubelet.service", "MainPID")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", sd.NsenterArgs("journalctl", "-u", "kubelet.service", "-o", "cat", "--no-tail", "-f")...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_PAGER="}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { cancel(); _ = cmd.Wait() }()
	prefix := "pid=" + pid + " check=1 "
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			require.Equal(t, prefix+"ok endpoint="+endpoint, line)
			return
		}
	}
	t.Fatalf("the kubelet (PID %s) logged no start-up check within 60 s: %s", pid, sd.Journal("kubelet.service", 10))
}
