// Package systemd_test runs pullguard serve under a real systemd, PID 1 of
// its own PID and mount namespace, booted from a Debian root made by
// debootstrap: the shipped units, their socket activation, readiness and
// sandbox, with a credential-provider plugin. Run it with `make
// e2e-systemd` (PULLGUARD_E2E_SYSTEMD=1, as root); see docs/testing.md.
package systemd_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The root's Debian release and packages; the cache is keyed by them.
const (
	suite    = "bookworm"
	packages = "systemd,systemd-sysv,dbus"
	cacheDir = "/var/cache/pullguard-e2e"
)

// The node's files, as the units name them.
const (
	serveSocket   = "/run/pullguard/pullguard.sock"
	runtimeSocket = "/run/containerd/containerd.sock"
	pluginBinDir  = "/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec"
	providerCfg   = "/etc/kubernetes/credential-provider.yaml"
	nodeConfig    = "/root/.docker/config.json"
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
	start := time.Now()
	root := newRoot(t)
	t.Logf("root ready in %s", time.Since(start).Round(time.Millisecond))
	report := pluginReports(t)
	installNode(t, root, report.Addr().String())

	start = time.Now()
	sd := boot(t, root)
	t.Logf("systemd booted in %s", time.Since(start).Round(time.Millisecond))

	sd.run(t, "systemctl", "start", "containerd.service")

	t.Run("socket activation", func(t *testing.T) {
		sd.run(t, "systemctl", "start", "pullguard.socket")
		assert.Equal(t, "inactive", sd.show(t, "pullguard.service", "ActiveState"), "the socket alone starts no serve")
		assert.Equal(t, "srw-rw---- root root", sd.run(t, "stat", "-c", "%A %U %G", serveSocket), "SocketMode=0660, root's")
		// A client's connection starts serve; it is answered.
		assert.Equal(t, "OK", sd.run(t, "/usr/local/bin/fakecri", "fsinfo", serveSocket))
		assert.Equal(t, "active", sd.show(t, "pullguard.service", "ActiveState"))
		assert.Contains(t, sd.run(t, "journalctl", "-u", "pullguard.service", "-o", "cat"), "socketFromSystemd=true")
	})

	t.Run("READY", func(t *testing.T) {
		// Type=notify: systemctl start returns once serve said READY=1
		// (StatusText is serve's STATUS= after it).
		assert.Equal(t, "notify", sd.show(t, "pullguard.service", "Type"))
		assert.Equal(t, "-999", sd.show(t, "pullguard.service", "OOMScoreAdjust"))
		sd.run(t, "systemctl", "stop", "pullguard.service")
		sd.run(t, "test", "-S", serveSocket) // systemd's socket stays
		sd.run(t, "systemctl", "start", "pullguard.service")
		assert.Equal(t, "running", sd.show(t, "pullguard.service", "SubState"))
		assert.Equal(t, "Serving on unix://"+serveSocket, sd.show(t, "pullguard.service", "StatusText"))

		// No READY while the runtime is down: the start fails, and
		// serve is started again (Restart=always) until it answers.
		// (Masked: serve's Wants= would start it again.)
		sd.run(t, "systemctl", "stop", "containerd.service")
		sd.run(t, "systemctl", "mask", "--runtime", "containerd.service")
		_, err := sd.try("systemctl", "restart", "pullguard.service")
		assert.Error(t, err, "a start with the runtime down does not succeed: %s", sd.run(t, "journalctl", "-u", "pullguard.service", "-o", "cat", "-n", "20"))
		assert.Equal(t, "activating", sd.show(t, "pullguard.service", "ActiveState"))
		assert.Equal(t, "auto-restart", sd.show(t, "pullguard.service", "SubState"))
		sd.run(t, "systemctl", "unmask", "--runtime", "containerd.service")
		sd.run(t, "systemctl", "start", "containerd.service")
		sd.run(t, "systemctl", "start", "pullguard.service")
		assert.Equal(t, "active", sd.show(t, "pullguard.service", "ActiveState"))

		// A restart of containerd leaves serve running (Wants=, not Requires=).
		pid := sd.show(t, "pullguard.service", "MainPID")
		sd.run(t, "systemctl", "restart", "containerd.service")
		assert.Equal(t, "active", sd.show(t, "pullguard.service", "ActiveState"))
		assert.Equal(t, pid, sd.show(t, "pullguard.service", "MainPID"))

		// Killed, serve comes back.
		restarts := sd.show(t, "pullguard.service", "NRestarts")
		sd.run(t, "systemctl", "kill", "--kill-whom=main", "--signal=KILL", "pullguard.service")
		sd.run(t, "systemctl", "start", "pullguard.service")
		assert.NotEqual(t, pid, sd.show(t, "pullguard.service", "MainPID"))
		assert.NotEqual(t, restarts, sd.show(t, "pullguard.service", "NRestarts"))
	})

	t.Run("sandbox", func(t *testing.T) {
		// A pull with a credential: serve looks the node's credentials up
		// beside it, which runs the plugin, inside serve's sandbox.
		assert.Equal(t, "NotFound", sd.run(t, "/usr/local/bin/fakecri", "pull", serveSocket, "registry.example/app:1", "tenant", "tenant-pw-e2e"))
		select {
		case line := <-report.lines:
			// The node keyring asks for the image's repository.
			assert.Equal(t, "ran uid=0 node-config=readable etc=read-only image=registry.example/app", line)
		case <-time.After(60 * time.Second):
			t.Fatalf("the plugin never reported; serve's journal:\n%s", sd.run(t, "journalctl", "-u", "pullguard.service", "-o", "cat"))
		}
		// serve's own mount namespace: the node's docker config readable,
		// /root read-only, its state directory writable.
		pid := sd.show(t, "pullguard.service", "MainPID")
		inServe := func(args ...string) error {
			_, err := sd.try(append([]string{"nsenter", "-t", pid, "-m", "-r", "-w", "--"}, args...)...)
			return err
		}
		require.NoError(t, inServe("test", "-x", "/usr/local/bin/fakecri"), "in the booted root, not the host's")
		assert.NoError(t, inServe("test", "-r", nodeConfig), "serve sees %s", nodeConfig)
		assert.Error(t, inServe("touch", "/root/.docker/e2e-write"), "/root is read-only to serve")
		assert.Error(t, inServe("touch", "/var/lib/kubelet/e2e-write"), "the kubelet's root directory is read-only to serve")
		assert.NoError(t, inServe("touch", "/var/lib/pullguard/e2e-write"), "serve's state directory is writable")
		journal := sd.run(t, "journalctl", "-u", "pullguard.service", "-o", "cat")
		assert.NotContains(t, journal, "could not be read", "serve read the node's docker config")
		assert.NotContains(t, journal, "tenant-pw-e2e")
		assert.NotContains(t, journal, "node-pw-e2e")

		out := sd.run(t, "systemd-analyze", "security", "pullguard.service")
		m := regexp.MustCompile(`Overall exposure level for pullguard\.service: ([0-9.]+) (\S+)`).FindStringSubmatch(out)
		require.NotNil(t, m, out)
		score, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		assert.LessOrEqual(t, score, 4.0)
		t.Logf("systemd-analyze security, online: %s %s", m[1], m[2])
	})

	t.Run("records", func(t *testing.T) {
		// serve makes its admin socket inside its sandbox, and root's
		// `pullguard records` beside it is answered there: a serve that
		// holds the store but does not answer makes records fail.
		journal := sd.run(t, "journalctl", "-u", "pullguard.service", "-o", "cat")
		assert.NotContains(t, journal, "Failed to serve the admin socket")
		assert.Equal(t, "srw------- root root", sd.run(t, "stat", "-c", "%A %U %G", "/run/pullguard/admin.sock"), "mode 0600, root's")
		out := sd.run(t, "/usr/bin/pullguard", "records", "-o", "json")
		assert.Contains(t, out, `"records"`)
	})

	t.Run("stop", func(t *testing.T) {
		sd.run(t, "systemctl", "stop", "pullguard.service")
		assert.Contains(t, sd.run(t, "journalctl", "-u", "pullguard.service", "-o", "cat"), "Stopped")
		sd.run(t, "test", "-S", serveSocket)
		sd.run(t, "systemctl", "stop", "pullguard.socket")
		_, err := sd.try("test", "-e", serveSocket)
		assert.Error(t, err, "stopping the socket unit removes the socket")
	})
}

// install installs Debian packages with apt-get.
func install(t *testing.T, pkgs ...string) {
	t.Helper()
	for _, args := range [][]string{{"apt-get", "update"}, append([]string{"apt-get", "install", "-y", "--no-install-recommends"}, pkgs...)} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
	}
}

// newRoot returns a fresh copy of the cached debootstrap root, made first
// when the cache has none for this suite and package list.
func newRoot(t *testing.T) string {
	t.Helper()
	sum := sha256.Sum256([]byte(suite + " minbase " + packages))
	cached := filepath.Join(cacheDir, "root-"+suite+"-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(cached, ".complete")); err != nil {
		require.NoError(t, os.MkdirAll(cacheDir, 0o755))
		tmp, err := os.MkdirTemp(cacheDir, ".building-")
		require.NoError(t, err)
		defer os.RemoveAll(tmp)
		out, err := exec.Command("debootstrap", "--variant=minbase", "--include="+packages, suite, tmp).CombinedOutput()
		require.NoError(t, err, "debootstrap: %s", tail(out))
		require.NoError(t, os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644))
		os.RemoveAll(cached)
		require.NoError(t, os.Rename(tmp, cached))
	}
	work, err := os.MkdirTemp("/var/tmp", "pullguard-e2e-systemd-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })
	root := filepath.Join(work, "root")
	out, err := exec.Command("cp", "-a", cached, root).CombinedOutput()
	require.NoError(t, err, "cp: %s", out)
	return root
}

func tail(b []byte) string {
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// installNode puts into root what the package installs (the binary at
// /usr/bin/pullguard, the units in /usr/lib/systemd/system and the
// kubelet's drop-in) and a node around it: containerd.service, a fake CRI
// runtime at containerd's socket; the kubelet's configuration file; a
// node credential in /root/.docker/config.json; and a credential-provider
// plugin, given to serve by the drop-in an operator with plugins writes.
func installNode(t *testing.T, root, reportAddr string) {
	t.Helper()
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	build := func(pkg, to string) {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(root, to), pkg)
		cmd.Dir, cmd.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", pkg, out)
	}
	build("./cmd/pullguard", "usr/bin/pullguard")
	build("./test/systemd/testdata/fakecri", "usr/local/bin/fakecri")
	build("./test/systemd/testdata/plugin", strings.TrimPrefix(pluginBinDir, "/")+"/e2e-plugin")

	write := func(path string, data []byte, mode os.FileMode) {
		p := filepath.Join(root, path)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, data, mode))
	}
	copyFile := func(from, to string) {
		data, err := os.ReadFile(filepath.Join(repo, from))
		require.NoError(t, err)
		write(to, data, 0o644)
	}
	copyFile("deploy/systemd/pullguard.service", "usr/lib/systemd/system/pullguard.service")
	copyFile("deploy/systemd/pullguard.socket", "usr/lib/systemd/system/pullguard.socket")
	copyFile("deploy/systemd/kubelet-pullguard.conf", "etc/systemd/system/kubelet.service.d/20-pullguard.conf")
	copyFile("deploy/kubelet/config-snippet.yaml", "var/lib/kubelet/config.yaml")

	// Units a node has that do not start here (D-Bus and logind fail
	// without inotify instances to spare) would hold the boot for their
	// start timeouts; systemctl needs neither.
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
	require.NoError(t, os.Chmod(filepath.Join(root, "root/.docker"), 0o700))

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

	// The shipped ExecStart with the kubelet's two plugin flags added;
	// everything else is the shipped unit.
	unit, err := os.ReadFile(filepath.Join(repo, "deploy/systemd/pullguard.service"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ExecStart=((?:.*\\\n)*.*)$`).FindSubmatch(unit)
	require.NotNil(t, m, "ExecStart in pullguard.service")
	write("etc/systemd/system/pullguard.service.d/10-credential-providers.conf", []byte("[Service]\nExecStart=\nExecStart="+string(m[1])+
		" \\\n  --image-credential-provider-config "+providerCfg+" \\\n  --image-credential-provider-bin-dir "+pluginBinDir+"\n"), 0o644)
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

// systemd is a booted systemd --system: pid is its PID on the host.
type systemd struct {
	pid int
}

// boot starts systemd as PID 1 of a new PID and mount namespace in root
// (docs/testing.md, "A real systemd"), and waits until it finished
// booting: systemd, given a NOTIFY_SOCKET as in a container, sends READY=1
// there when its start-up finished, and the datagram's credentials give
// its PID on the host. A cleanup kills it, and everything in its
// namespace, with SIGKILL.
func boot(t *testing.T, root string) *systemd {
	t.Helper()
	notifyPath := filepath.Join(root, ".e2e-notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { notify.Close() })
	raw, err := notify.SyscallConn()
	require.NoError(t, err)
	var serr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1)
	}))
	require.NoError(t, serr)

	script := `mount --make-rprivate / && mount --bind "$ROOT" "$ROOT" &&
mount --rbind /sys "$ROOT/sys" && mount --rbind /dev "$ROOT/dev" && cd "$ROOT" &&
exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin container=other NOTIFY_SOCKET=/.e2e-notify chroot . /bin/sh -c '
mount -t proc proc /proc; mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /tmp
exec /lib/systemd/systemd --system --log-target=console'`
	cmd := exec.Command("unshare", "--pid", "--mount", "--uts", "--ipc", "--fork", "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "ROOT="+root)
	logPath := filepath.Join(filepath.Dir(root), "systemd.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	sd := &systemd{}
	t.Cleanup(func() {
		if sd.pid > 0 {
			_ = syscall.Kill(sd.pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		<-done
	})
	readLog := func() string { b, _ := os.ReadFile(logPath); return tail(b) }

	type msg struct {
		pid   int
		state string
	}
	msgs := make(chan msg, 16)
	go func() {
		buf, oob := make([]byte, 4096), make([]byte, 256)
		for {
			n, oobn, _, _, err := notify.ReadMsgUnix(buf, oob)
			if err != nil {
				close(msgs)
				return
			}
			m := msg{state: string(buf[:n])}
			if cmsgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, c := range cmsgs {
					if cred, err := syscall.ParseUnixCredentials(&c); err == nil {
						m.pid = int(cred.Pid)
					}
				}
			}
			msgs <- m
		}
	}()
	deadline := time.After(120 * time.Second)
	for {
		select {
		case m, ok := <-msgs:
			require.True(t, ok, "the notify socket closed")
			if m.pid > 0 {
				sd.pid = m.pid
			}
			if strings.Contains("\n"+m.state+"\n", "\nREADY=1\n") {
				require.Positive(t, sd.pid, "READY=1 without the sender's PID")
				out, _ := sd.try("systemctl", "is-system-running")
				t.Logf("systemd (PID %d on the host): %s", sd.pid, out)
				return sd
			}
		case <-done:
			t.Fatalf("unshare exited: %s", readLog())
		case <-deadline:
			t.Fatalf("systemd did not finish booting: %s", readLog())
		}
	}
}

func (sd *systemd) nsenterArgs(args ...string) []string {
	return append([]string{"-t", strconv.Itoa(sd.pid), "-m", "-p", "-u", "-i", "-r", "-w"}, args...)
}

// try runs a command inside, with a deadline, and returns its output.
func (sd *systemd) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", sd.nsenterArgs(args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// run runs a command inside and fails the test when it fails.
func (sd *systemd) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := sd.try(args...)
	require.NoError(t, err, "%v: %s", args, out)
	return out
}

// show is a property of a unit (systemctl show -p).
func (sd *systemd) show(t *testing.T, unit, prop string) string {
	t.Helper()
	return sd.run(t, "systemctl", "show", "-p", prop, "--value", unit)
}
