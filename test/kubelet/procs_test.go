package kubelet

import (
	"github.com/pullguard/pullguard/internal/bootsystemd"

	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// output collects a child process's lines, mirrors them to a file (kept
// after a failure) and lets a test wait for a line.
type output struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced at every new line
	file    *os.File
}

func newOutput(path string) (*output, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log file %s: %w", path, err)
	}
	return &output{file: f, changed: make(chan struct{})}, nil
}

func (o *output) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		o.mu.Lock()
		o.lines = append(o.lines, sc.Text())
		fmt.Fprintln(o.file, sc.Text())
		close(o.changed)
		o.changed = make(chan struct{})
		o.mu.Unlock()
	}
}

// position is the index the next line will have.
func (o *output) position() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.lines)
}

func (o *output) from(pos int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.lines[pos:]...)
}

func (o *output) tail(n int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	start := max(0, len(o.lines)-n)
	return strings.Join(o.lines[start:], "\n")
}

// await waits until a line from pos on contains text, or ctx ends.
func (o *output) await(ctx context.Context, pos int, text string) error {
	for {
		o.mu.Lock()
		for _, l := range o.lines[pos:] {
			if strings.Contains(l, text) {
				o.mu.Unlock()
				return nil
			}
		}
		pos = len(o.lines)
		ch := o.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("no line with %q: %w", text, ctx.Err())
		}
	}
}

// child is a process this test started; it is stopped by its PID (and its
// process group) only.
type child struct {
	name string
	cmd  *exec.Cmd
	out  *output
	done chan struct{}
}

func spawn(out *output, env []string, name string, args ...string) (*child, error) {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if env != nil {
		cmd.Env = env
	}
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		out.read(pipe)
		_ = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's process group, then SIGKILL after grace.
func (c *child) stop(grace time.Duration) {
	if c == nil || c.cmd.Process == nil || c.exited() {
		return // never signal a PID that may have been reused
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// poll calls cond every interval until it reports done or the timeout
// passes; the last error explains a timeout. Done with an error is a
// failure that no waiting can mend: poll returns it at once.
func poll(timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return err
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("not done within %s: %w", timeout, last)
			}
			return fmt.Errorf("not done within %s", timeout)
		}
		<-tick.C
	}
}

// mountNS is a fleet node's namespace: its systemd's mount and PID
// namespaces (bootNodeSystem), in which the directories the kubelet and
// containerd use whatever their configuration says (/run, /var/lib,
// /var/log: the kubelet's device-plugins and pod-resources sockets,
// /var/log/pods and /var/log/containers, containerd's shim sockets under
// /run/containerd) are the node's own; the harness's commands enter it
// with nsenter, which execs them (no fork: their PID is the one the test
// stops; commandInPIDNS forks). The namespace, and every mount made in it,
// ends with its systemd, killed by its PID at the end.
type mountNS struct {
	// pid is the node's systemd's PID on the host, sd the system, root
	// its root.
	pid  string
	sd   *bootsystemd.System
	root string
	// shadowed maps each directory of the host to the node's own.
	shadowed map[string]string
}

// shadowedDirs are the host's directories a node's namespace replaces.
var shadowedDirs = []string{"/run", "/var/lib", "/var/log"}

// command is name with args run in ns (nil: the test's namespace).
func (ns *mountNS) command(name string, args ...string) (string, []string) {
	if ns == nil {
		return name, args
	}
	return "nsenter", append([]string{"--target", ns.pid, "--mount", "--", name}, args...)
}

// commandInPIDNS is command, but in a node's systemd's PID namespace too
// (nsenter forks then: the PID is nsenter's, and the program ends at the
// latest with the namespace's systemd, killed at the end), with that PID
// namespace's /proc. containerd runs
// there: its pods' processes, the node agent among them, are then seen by
// the node's systemd, which refuses a client on its private socket whose
// PID it cannot see, as a node's systemd sees every process of the node.
func (ns *mountNS) commandInPIDNS(name string, args ...string) (string, []string) {
	if ns == nil || ns.sd == nil {
		return ns.command(name, args...)
	}
	// A mount namespace of its own in the node's, whose mounts stay
	// shared with it, but for its /proc: that of the node's PID namespace,
	// which containerd and runc read their own processes in.
	script := `mount --make-private /proc && mount -t proc proc /proc && exec "$0" "$@"`
	return "nsenter", append([]string{"--target", ns.pid, "--mount", "--pid", "--",
		"unshare", "--mount", "--propagation", "unchanged", "/bin/sh", "-c", script, name}, args...)
}
