//go:build linux

package bootsystemd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/debpkg"
)

// The root's Debian release and packages; the cache is keyed by them.
const (
	Suite    = "bookworm"
	Packages = "systemd,systemd-sysv,dbus"
	CacheDir = "/var/cache/pullguard-e2e"
)

// NewRoot returns a fresh copy of the cached debootstrap root, made first
// (debootstrap installed with apt when missing) when the cache has none
// for Suite and Packages. The copy is root under a new directory in
// parent ("": /var/tmp), removed at the end.
func NewRoot(t testing.TB, parent string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(Suite + " minbase " + Packages))
	cached := filepath.Join(CacheDir, "root-"+Suite+"-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(cached, ".complete")); err != nil {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			require.NoError(t, debpkg.Install("debootstrap"))
		}
		require.NoError(t, os.MkdirAll(CacheDir, 0o755))
		tmp, err := os.MkdirTemp(CacheDir, ".building-")
		require.NoError(t, err)
		defer os.RemoveAll(tmp)
		out, err := exec.Command("debootstrap", "--variant=minbase", "--include="+Packages, Suite, tmp).CombinedOutput()
		require.NoError(t, err, "debootstrap: %s", Tail(out))
		require.NoError(t, os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644))
		os.RemoveAll(cached)
		require.NoError(t, os.Rename(tmp, cached))
	}
	if parent == "" {
		parent = "/var/tmp"
	}
	work, err := os.MkdirTemp(parent, "pullguard-e2e-systemd-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })
	root := filepath.Join(work, "root")
	out, err := exec.Command("cp", "-a", cached, root).CombinedOutput()
	require.NoError(t, err, "cp: %s", out)
	return root
}

// Tail is the last 3000 bytes of b.
func Tail(b []byte) string {
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// System is a booted systemd --system: PID is its PID on the host.
type System struct {
	PID int
	// Log is the file of systemd's console output.
	Log string
}

// Options are a boot's.
type Options struct {
	// Setup is a shell script run in the new namespaces before the chroot,
	// after root is bind-mounted onto itself (systemd needs / to be a mount
	// point: without it every sandboxed unit fails with 226/NAMESPACE) and
	// /sys and /dev are in it; $ROOT is root. Its mounts under $ROOT are
	// the system's: /run, /tmp a mount point there is kept as it is (a
	// tmpfs otherwise).
	Setup string
}

// Boot starts systemd as PID 1 of a new PID and mount namespace in root,
// and waits until it finished booting: systemd, given a NOTIFY_SOCKET as
// in a container, sends READY=1 there when its start-up finished, and the
// datagram's credentials give its PID on the host. A cleanup kills it, and
// everything in its namespace, with SIGKILL (its mounts go with the
// namespace).
func Boot(t testing.TB, root string, o Options) *System {
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

	script := `set -e
mount --make-rprivate / && mount --bind "$ROOT" "$ROOT" &&
mount --rbind /sys "$ROOT/sys" && mount --rbind /dev "$ROOT/dev"
` + o.Setup + `
cd "$ROOT"
exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin container=other NOTIFY_SOCKET=/.e2e-notify chroot . /bin/sh -c '
mount -t proc proc /proc
mountpoint -q /run || mount -t tmpfs tmpfs /run
mountpoint -q /tmp || mount -t tmpfs tmpfs /tmp
exec /lib/systemd/systemd --system --log-target=console'`
	cmd := exec.Command("unshare", "--pid", "--mount", "--uts", "--ipc", "--fork", "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "ROOT="+root)
	sd := &System{Log: filepath.Join(filepath.Dir(root), "systemd.log")}
	logFile, err := os.Create(sd.Log)
	require.NoError(t, err)
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		if sd.PID > 0 {
			_ = syscall.Kill(sd.PID, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		<-done
	})
	readLog := func() string { b, _ := os.ReadFile(sd.Log); return Tail(b) }

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
				sd.PID = m.pid
			}
			if strings.Contains("\n"+m.state+"\n", "\nREADY=1\n") {
				require.Positive(t, sd.PID, "READY=1 without the sender's PID")
				out, _ := sd.Try("systemctl", "is-system-running")
				t.Logf("systemd (PID %d on the host): %s", sd.PID, out)
				return sd
			}
		case <-done:
			t.Fatalf("unshare exited: %s", readLog())
		case <-deadline:
			t.Fatalf("systemd did not finish booting: %s", readLog())
		}
	}
}

// NsenterArgs are nsenter's arguments that run args in the system's
// namespaces and root.
func (sd *System) NsenterArgs(args ...string) []string {
	return append([]string{"-t", strconv.Itoa(sd.PID), "-m", "-p", "-u", "-i", "-r", "-w"}, args...)
}

// Env is the environment of a command run inside: root's shell's.
var Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}

// Try runs a command inside, with a deadline, and returns its output.
func (sd *System) Try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", sd.NsenterArgs(args...)...)
	cmd.Env = Env
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Run runs a command inside and fails the test when it fails.
func (sd *System) Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := sd.Try(args...)
	require.NoError(t, err, "%v: %s", args, out)
	return out
}

// Show is a property of a unit (systemctl show -p).
func (sd *System) Show(t testing.TB, unit, prop string) string {
	t.Helper()
	return sd.Run(t, "systemctl", "show", "-p", prop, "--value", unit)
}

// IsEnabled is `systemctl is-enabled` of a unit.
func (sd *System) IsEnabled(unit string) string {
	out, _ := sd.Try("systemctl", "is-enabled", unit)
	return out
}

// Journal is a unit's journal, its last n lines (all when 0).
func (sd *System) Journal(unit string, n int) string {
	args := []string{"journalctl", "-u", unit, "-o", "cat"}
	if n > 0 {
		args = append(args, "-n", strconv.Itoa(n))
	}
	out, _ := sd.Try(args...)
	return out
}

// Monotonic is a unit's timestamp property in µs of CLOCK_MONOTONIC.
func (sd *System) Monotonic(t testing.TB, unit, prop string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(sd.Show(t, unit, prop), 10, 64)
	require.NoError(t, err, "%s %s", unit, prop)
	require.NotZero(t, v, "%s %s", unit, prop)
	return v
}
