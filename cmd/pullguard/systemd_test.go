package main_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/critest"
	"github.com/pullguard/pullguard/internal/debpkg"
)

const (
	socketUnitFile  = "../../deploy/systemd/pullguard.socket"
	kubeletDropIn   = "../../deploy/systemd/kubelet-pullguard.conf"
	securityCeiling = 4.0 // systemd-analyze security's "OK"
)

// requireSystemdTool skips the test when tool (from Debian's systemd
// package) is missing; with CI=true, as root, it installs the package
// first, and a tool still missing fails the test.
func requireSystemdTool(t *testing.T, tool string) string {
	t.Helper()
	if path, err := exec.LookPath(tool); err == nil {
		return path
	}
	if os.Getenv("CI") != "true" {
		t.Skipf("%s is not installed (Debian's systemd package; with CI=true the test installs it)", tool)
	}
	require.Zero(t, os.Geteuid(), "CI=true: %s is missing, and only root can install the systemd package", tool)
	require.NoError(t, debpkg.Install("systemd"))
	path, err := exec.LookPath(tool)
	require.NoError(t, err, "%s still missing after apt-get install systemd", tool)
	return path
}

// unitRoot is a file system root holding the shipped units where the
// package installs them, the kubelet's drop-in on a stub kubelet.service,
// the binary at the units' /usr/bin/pullguard, and the host's targets and
// slices (the units' implicit dependencies), for systemd-analyze --root.
func unitRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	units := filepath.Join(root, "usr/lib/systemd/system")
	for _, d := range []string{units, filepath.Join(root, "usr/bin"), filepath.Join(root, "etc/systemd/system/kubelet.service.d")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	copyFile := func(from, to string, mode os.FileMode) {
		data, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(to, data, mode))
	}
	copyFile(unitFile, filepath.Join(units, "pullguard.service"), 0o644)
	copyFile(socketUnitFile, filepath.Join(units, "pullguard.socket"), 0o644)
	copyFile(kubeletDropIn, filepath.Join(root, "etc/systemd/system/kubelet.service.d/20-pullguard.conf"), 0o644)
	copyFile(binary, filepath.Join(root, "usr/bin/pullguard"), 0o755)
	require.NoError(t, os.WriteFile(filepath.Join(units, "kubelet.service"), []byte("[Service]\nExecStart=/usr/bin/kubelet\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/bin/kubelet"), []byte("#!/bin/sh\n"), 0o755))
	for _, pattern := range []string{"*.target", "*.slice"} {
		host, err := filepath.Glob(filepath.Join("/lib/systemd/system", pattern))
		require.NoError(t, err)
		for _, f := range host {
			if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
				copyFile(f, filepath.Join(units, filepath.Base(f)), 0o644)
			}
		}
	}
	return root
}

// TestDeployUnitsVerify: systemd-analyze verify finds nothing to say about
// the shipped units, the kubelet's drop-in included.
func TestDeployUnitsVerify(t *testing.T) {
	analyze := requireSystemdTool(t, "systemd-analyze")
	root := unitRoot(t)
	cmd := exec.Command(analyze, "verify", "--root="+root, "pullguard.socket", "pullguard.service", "kubelet.service")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "systemd-analyze verify: %s", out)
	assert.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify has warnings")
}

// TestDeployUnitsVerifyCatchesMistakes: the check above can fail: a unit
// with an unknown setting or a binary that is not there is reported.
func TestDeployUnitsVerifyCatchesMistakes(t *testing.T) {
	analyze := requireSystemdTool(t, "systemd-analyze")
	for name, edit := range map[string]func(string) string{
		"unknown setting": func(s string) string { return strings.Replace(s, "[Service]\n", "[Service]\nNotASetting=1\n", 1) },
		"missing binary": func(s string) string {
			return strings.Replace(s, "/usr/bin/pullguard serve", "/usr/bin/pullguard-gone serve", 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := unitRoot(t)
			path := filepath.Join(root, "usr/lib/systemd/system/pullguard.service")
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			edited := edit(string(data))
			require.NotEqual(t, string(data), edited)
			require.NoError(t, os.WriteFile(path, []byte(edited), 0o644))
			out, _ := exec.Command(analyze, "verify", "--root="+root, "pullguard.service").CombinedOutput()
			assert.NotEmpty(t, strings.TrimSpace(string(out)))
		})
	}
}

var (
	overallExposure = regexp.MustCompile(`Overall exposure level for pullguard\.service: ([0-9.]+) (\S+)`)
	// An open setting of systemd-analyze security: "✗ NAME  DESCRIPTION  EXPOSURE".
	openSetting = regexp.MustCompile(`(?m)^✗ (\S+)\s.*?\s([0-9.]+)\s*$`)
	// The unit's comment on a setting left open: "# Open: NAME, NAME. reason".
	openComment = regexp.MustCompile(`(?m)^# Open: ([^.]+)\.`)
)

// TestDeployUnitSecurity: systemd-analyze security scores the shipped
// service at most 4.0 ("OK"), and every setting it finds open is named in
// one of the unit's "# Open:" comments, which say why.
func TestDeployUnitSecurity(t *testing.T) {
	analyze := requireSystemdTool(t, "systemd-analyze")
	root := unitRoot(t)
	out, err := exec.Command(analyze, "security", "--offline=true", "--root="+root, "--threshold=40", "pullguard.service").CombinedOutput()
	require.NoError(t, err, "systemd-analyze security exits non-zero above --threshold=40 (4.0): %s", out)
	m := overallExposure.FindStringSubmatch(string(out))
	require.NotNil(t, m, "no overall exposure in: %s", out)
	score, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.LessOrEqual(t, score, securityCeiling)
	assert.Equal(t, "OK", m[2])
	t.Logf("systemd-analyze security: %s %s", m[1], m[2])

	unit, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	var commented []string
	for _, c := range openComment.FindAllStringSubmatch(string(unit), -1) {
		for _, name := range strings.Split(c[1], ",") {
			if name = strings.TrimSpace(name); name != "" {
				commented = append(commented, name)
			}
		}
	}
	open := openSetting.FindAllStringSubmatch(string(out), -1)
	require.NotEmpty(t, open, "no open setting parsed from: %s", out)
	for _, o := range open {
		// "User=/DynamicUser=" names User; "RestrictAddressFamilies=~AF_UNIX" names RestrictAddressFamilies.
		name := strings.FieldsFunc(o[1], func(r rune) bool { return r == '=' || r == '/' })[0]
		assert.Contains(t, commented, name, "%s is open (exposure %s) and the unit has no \"# Open: %s\" comment", o[1], o[2], name)
	}
}

// heldRuntime is a CRI image service that answers nothing until released.
type heldRuntime struct {
	*critest.ImageService
	asked    chan struct{} // closed at the first call
	release  chan struct{}
	onceAsk  sync.Once
	onceFree sync.Once
}

func newHeldRuntime() *heldRuntime {
	return &heldRuntime{ImageService: critest.NewImageService(), asked: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldRuntime) hold(ctx context.Context) error {
	h.onceAsk.Do(func() { close(h.asked) })
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *heldRuntime) free() { h.onceFree.Do(func() { close(h.release) }) }

func (h *heldRuntime) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	if err := h.hold(ctx); err != nil {
		return nil, err
	}
	return h.ImageService.ImageFsInfo(ctx, req)
}

func (h *heldRuntime) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	if err := h.hold(ctx); err != nil {
		return nil, err
	}
	return h.ImageService.ListImages(ctx, req)
}

func (h *heldRuntime) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	if err := h.hold(ctx); err != nil {
		return nil, err
	}
	return h.ImageService.ImageStatus(ctx, req)
}

// notifySocket is a NOTIFY_SOCKET: the sd_notify datagrams serve sends,
// one state ("READY=1") per line, in order.
type notifySocket struct {
	path   string
	conn   *net.UnixConn
	states chan string
}

func newNotifySocket(t *testing.T, dir string) *notifySocket {
	t.Helper()
	n := &notifySocket{path: filepath.Join(dir, "notify"), states: make(chan string, 64)}
	var err error
	n.conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { n.conn.Close() })
	go func() {
		defer close(n.states)
		buf := make([]byte, 4096)
		for {
			k, err := n.conn.Read(buf)
			if err != nil {
				return
			}
			for _, s := range strings.Split(strings.TrimSpace(string(buf[:k])), "\n") {
				n.states <- s
			}
		}
	}()
	return n
}

// until returns the states received up to and including want, failing the
// test at the deadline.
func (n *notifySocket) until(t *testing.T, want string, deadline <-chan time.Time) []string {
	t.Helper()
	var got []string
	for {
		select {
		case s, ok := <-n.states:
			require.True(t, ok, "the notify socket closed; got %q", got)
			got = append(got, s)
			if s == want {
				return got
			}
		case <-deadline:
			t.Fatalf("no %s on the notify socket; got %q", want, got)
		}
	}
}

// mark sends want to the socket itself: once until returns it, every
// datagram serve sent before it has been read (a datagram socket's queue
// is in order).
func (n *notifySocket) mark(t *testing.T, want string) {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.path, Net: "unixgram"})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte(want))
	require.NoError(t, err)
}

// activated is serve started by systemd-socket-activate, which listens on
// the socket, execs serve in its own process (the pid started) at the
// first connection, and passes the socket (LISTEN_FDS).
type activated struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

// socketActivate starts serve under systemd-socket-activate with its
// options opts (the last one the path it listens on last), NOTIFY_SOCKET
// notify and serve's args after --listen, and waits until it listens. The
// process is killed at the end of the test.
func socketActivate(t *testing.T, opts []string, notify string, args ...string) *activated {
	t.Helper()
	tool := requireSystemdTool(t, "systemd-socket-activate")
	a := &activated{out: &lockedBuffer{ch: make(chan struct{}, 1)}, done: make(chan struct{})}
	all := append(append(slices.Clone(opts), "-E", "NOTIFY_SOCKET="+notify, binary, "serve", "--listen"), args...)
	a.cmd = exec.Command(tool, all...)
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	require.NoError(t, a.cmd.Start())
	go func() { _ = a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			_ = a.cmd.Process.Kill()
			<-a.done
		}
	})
	a.waitFor(t, "Listening on "+opts[len(opts)-1], time.After(30*time.Second))
	return a
}

// waitFor waits until the output holds s.
func (a *activated) waitFor(t *testing.T, s string, deadline <-chan time.Time) {
	t.Helper()
	for !strings.Contains(a.out.String(), s) {
		select {
		case <-a.out.ch:
		case <-a.done:
			if !strings.Contains(a.out.String(), s) {
				t.Fatalf("exited before %q: %s", s, a.out.String())
			}
		case <-deadline:
			t.Fatalf("no %q: %s", s, a.out.String())
		}
	}
}

// exitCode waits for the process to exit.
func (a *activated) exitCode(t *testing.T, deadline <-chan time.Time) int {
	t.Helper()
	select {
	case <-a.done:
	case <-deadline:
		t.Fatalf("did not exit: %s", a.out.String())
	}
	return a.cmd.ProcessState.ExitCode()
}

func criClient(t *testing.T, socket string) runtimeapi.ImageServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewImageServiceClient(conn)
}

// TestServeSocketActivationAndReadiness: serve started by
// systemd-socket-activate at a client's first connection serves on the
// socket it was passed. It says READY=1 on NOTIFY_SOCKET only once its
// record store is loaded and the runtime answers; the client that
// connected before waits and is answered. SIGTERM gives STOPPING=1, and
// the socket's file, systemd's, stays.
func TestServeSocketActivationAndReadiness(t *testing.T) {
	dir := shortDir(t)
	socket, root := filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root")
	notify := newNotifySocket(t, dir)
	runtime := newHeldRuntime()
	t.Cleanup(runtime.free)
	endpoint := critest.Serve(t, runtime)
	a := socketActivate(t, []string{"-l", socket}, notify.path, "unix://"+socket, "--root-dir", root, "--image-service-endpoint", "unix://"+endpoint,
		"--metrics-bind-address", "0", "--kubelet-root-dir", filepath.Join(dir, "no-kubelet"), "-v=2")
	deadline := time.After(60 * time.Second)

	// The early client: its connection starts serve.
	type answer struct {
		resp *runtimeapi.ImageFsInfoResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := criClient(t, socket).ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}, grpc.WaitForReady(true))
		answered <- answer{resp, err}
	}()
	a.waitFor(t, "Execing "+binary, deadline)

	// serve asks the runtime, which does not answer: no READY.
	select {
	case <-runtime.asked:
	case <-a.done:
		t.Fatalf("serve exited: %s", a.out.String())
	case <-deadline:
		t.Fatalf("serve never asked the runtime: %s", a.out.String())
	}
	notify.mark(t, "TEST=held")
	before := notify.until(t, "TEST=held", deadline)
	assert.NotContains(t, before, "READY=1", "READY before the runtime answered")
	assert.Contains(t, before, "STATUS=Loading the record store")
	select {
	case ans := <-answered:
		t.Fatalf("the client was answered before serve was ready: %v", ans.err)
	default:
	}

	runtime.free()
	ready := notify.until(t, "READY=1", deadline)
	assert.NotContains(t, ready, "STOPPING=1")
	assert.FileExists(t, filepath.Join(root, "credtracker", "records.db"), "READY with the store loaded")
	select {
	case ans := <-answered:
		require.NoError(t, ans.err, "the client that connected before READY")
		assert.NotEmpty(t, ans.resp.GetImageFilesystems())
	case <-deadline:
		t.Fatal("the client that connected before READY was not answered")
	}
	assert.Contains(t, a.out.String(), "socketFromSystemd=true")

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	stopping := notify.until(t, "STOPPING=1", deadline)
	assert.NotContains(t, stopping, "READY=1", "one READY only")
	assert.Equal(t, 0, a.exitCode(t, deadline), a.out.String())
	fi, err := os.Lstat(socket)
	require.NoError(t, err, "the socket's file is systemd's: serve leaves it")
	assert.NotZero(t, fi.Mode()&os.ModeSocket)
}

// TestServeRefusesOtherInheritedSockets: sockets passed by systemd that
// are not one stream socket at --listen's path are refused, with what is
// wrong said, before serve serves or says READY=1, and serve makes no
// socket of its own.
func TestServeRefusesOtherInheritedSockets(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(dir string) []string
		want func(dir string) string
	}{{
		name: "another path",
		opts: func(dir string) []string { return []string{"-l", filepath.Join(dir, "other.sock")} },
		want: func(dir string) string {
			return "systemd passed the socket unix:" + filepath.Join(dir, "other.sock") + ", but --listen is unix://" + filepath.Join(dir, "pg.sock")
		},
	}, {
		name: "two sockets",
		opts: func(dir string) []string {
			return []string{"-l", filepath.Join(dir, "pg.sock"), "-l", filepath.Join(dir, "other.sock")}
		},
		want: func(string) string { return "systemd passed 2 sockets (LISTEN_FDS); serve takes one" },
	}, {
		name: "a datagram socket",
		opts: func(dir string) []string { return []string{"-d", "-l", filepath.Join(dir, "pg.sock")} },
		want: func(string) string { return "is not a listening stream socket" },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			root, opts := filepath.Join(dir, "root"), tc.opts(dir)
			notify := newNotifySocket(t, dir)
			endpoint := critest.Serve(t, critest.NewImageService())
			a := socketActivate(t, opts, notify.path, "unix://"+filepath.Join(dir, "pg.sock"), "--root-dir", root,
				"--image-service-endpoint", "unix://"+endpoint, "--metrics-bind-address", "0", "--kubelet-root-dir", filepath.Join(dir, "no-kubelet"))
			deadline := time.After(60 * time.Second)
			// A connection, or a datagram, starts serve.
			last := opts[len(opts)-1]
			if slices.Contains(opts, "-d") {
				c, err := net.Dial("unixgram", last)
				require.NoError(t, err)
				_, err = c.Write([]byte("x"))
				require.NoError(t, err)
				defer c.Close()
			} else {
				c, err := net.Dial("unix", last)
				require.NoError(t, err)
				defer c.Close()
			}
			assert.Equal(t, 1, a.exitCode(t, deadline))
			assert.Contains(t, a.out.String(), tc.want(dir))
			assert.NotContains(t, a.out.String(), "pullguard: serving on")
			notify.mark(t, "TEST=end")
			assert.NotContains(t, notify.until(t, "TEST=end", deadline), "READY=1")
			if !slices.Contains(opts, filepath.Join(dir, "pg.sock")) {
				_, err := os.Stat(filepath.Join(dir, "pg.sock"))
				assert.ErrorIs(t, err, os.ErrNotExist, "serve made no socket of its own")
			}
			if entries, err := os.ReadDir(root); err == nil {
				names := make([]string, 0, len(entries))
				for _, e := range entries {
					names = append(names, e.Name())
				}
				assert.Equal(t, []string{"serve.lock"}, names, "nothing but the lock under the root directory")
			}
		})
	}
}
