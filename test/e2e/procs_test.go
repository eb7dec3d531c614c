package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// logSink keeps a process's output, line by line, and wakes waiters when a
// line arrives; it also copies everything to a file for the CI log.
type logSink struct {
	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
	file  *os.File
}

func newLogSink(path string) (*logSink, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	s := &logSink{file: f}
	s.cond = sync.NewCond(&s.mu)
	return s, nil
}

func (s *logSink) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		s.lines = append(s.lines, line)
		fmt.Fprintln(s.file, line)
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// mark is the position of the next line.
func (s *logSink) mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lines)
}

func (s *logSink) since(mark int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines[mark:]...)
}

func (s *logSink) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// waitFor blocks until a line after mark contains substr, or the deadline.
func (s *logSink) waitFor(mark int, substr string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for _, l := range s.lines[mark:] {
			if strings.Contains(l, substr) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		s.cond.Wait()
	}
}

// process is a child process whose output goes to a logSink.
type process struct {
	cmd  *exec.Cmd
	log  *logSink
	done chan struct{}
}

func startProcess(log *logSink, name string, args ...string) (*process, error) {
	return startProcessEnv(log, nil, name, args...)
}

// startProcessEnv is startProcess with env added to the test's own
// environment (none: the test's environment as it is).
func startProcessEnv(log *logSink, env []string, name string, args ...string) (*process, error) {
	cmd := exec.Command(name, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		log.consume(out)
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
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

// dockerRegistry is the Debian distribution registry with token auth.
type dockerRegistry struct {
	dir    string
	addr   string
	config string
	log    *logSink
	proc   *process
}

func startDockerRegistry(dir string, is *issuer) (*dockerRegistry, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &dockerRegistry{dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	certPath := filepath.Join(dir, "issuer.pem")
	if err := os.WriteFile(certPath, is.certPEM, 0o644); err != nil {
		return nil, err
	}
	r.config = filepath.Join(dir, "registry.yml")
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
auth:
  token:
    realm: %s
    service: %s
    issuer: %s
    rootcertbundle: %s
`, filepath.Join(dir, "storage"), r.addr, is.realm(), is.service, is.name, certPath)
	if err := os.WriteFile(r.config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	if r.log, err = newLogSink(filepath.Join(dir, "registry.log")); err != nil {
		return nil, err
	}
	is.front(r.addr)
	return r, r.start()
}

func (r *dockerRegistry) start() error {
	p, err := startProcess(r.log, "/usr/bin/docker-registry", "serve", r.config)
	if err != nil {
		return err
	}
	r.proc = p
	return waitHTTP("http://"+r.addr+"/v2/", 30*time.Second)
}

func (r *dockerRegistry) stop() { r.proc.stop() }

func waitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s: %w", url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a child process's start-up, not a test's timing
	}
}

// request is one line of the registry's access log.
type request struct {
	Method, Path string
	Status       int
}

var accessLine = regexp.MustCompile(`"(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+) HTTP/[0-9.]+" (\d{3}) `)

// sync makes sure every request made before it is in the log: it sends a
// request of its own and waits for its line.
var syncSeq int

func (r *dockerRegistry) sync() error {
	syncSeq++
	path := fmt.Sprintf("/v2/_sync/%d/tags/list", syncSeq)
	mark := r.log.mark()
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if !r.log.waitFor(mark, path, 10*time.Second) {
		return errors.New("the registry did not log a request")
	}
	return nil
}

// requests returns the access log's requests since mark, without the
// harness's own sync requests.
func (r *dockerRegistry) requests(mark int) []request {
	var out []request
	for _, l := range r.log.since(mark) {
		m := accessLine.FindStringSubmatch(l)
		if m == nil || strings.HasPrefix(m[2], "/v2/_sync/") {
			continue
		}
		var status int
		fmt.Sscanf(m[3], "%d", &status)
		out = append(out, request{Method: m[1], Path: m[2], Status: status})
	}
	return out
}

// containerd is a private containerd: its own config, root, state and socket.
type containerd struct {
	dir    string
	socket string
	// hosts is its CRI registry's config_path: a directory per registry
	// host holding that host's hosts.toml. The harness creates it empty,
	// so a registry with no directory in it is reached as without
	// config_path; a scenario that mirrors a host name writes that host's
	// directory and removes it when done.
	hosts string
	log   *logSink
	proc  *process
}

func startContainerd(dir string, log *logSink) (*containerd, error) {
	c := &containerd{dir: dir, socket: filepath.Join(dir, "c.sock"), hosts: filepath.Join(dir, "certs.d")}
	if err := os.MkdirAll(c.hosts, 0o755); err != nil {
		return nil, err
	}
	// Config version 2, the format of the Debian containerd (1.6), whose
	// CRI plugin takes config_path under its registry table.
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.socket, c.hosts)
	path := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	// A restart writes on after the earlier process's lines: a failure's
	// cause is often in them, and the leak scan reads them all.
	c.log = log
	if c.log == nil {
		var err error
		if c.log, err = newLogSink(filepath.Join(dir, "containerd.log")); err != nil {
			return nil, err
		}
	}
	mark := c.log.mark()
	var err error
	if c.proc, err = startProcess(c.log, "containerd", "--config", path); err != nil {
		return nil, err
	}
	if !c.log.waitFor(mark, "containerd successfully booted", 30*time.Second) {
		return nil, fmt.Errorf("containerd did not start serving; its log:\n%s", c.log.all())
	}
	if err := c.waitCRI(30 * time.Second); err != nil {
		c.proc.stop()
		return nil, fmt.Errorf("%w; containerd's log:\n%s", err, c.log.all())
	}
	return c, nil
}

// waitCRI blocks until containerd's CRI plugin answers: criruntime.NewRemote
// returns only once an ImageFsInfo call succeeds. containerd logs
// "successfully booted" before the plugin has finished its own start, and
// until then every CRI call fails with "server is not initialized yet": a
// test that called at once would see that error instead of the runtime's
// answer.
func (c *containerd) waitCRI(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		svc, err := criruntime.NewRemote(ctx, c.endpoint(), 5*time.Second)
		if err == nil {
			_ = svc.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd's CRI at %s did not answer within %s: %w", c.socket, timeout, err)
		}
		time.Sleep(50 * time.Millisecond) // waiting on another process's start, not on this test's timing
	}
}

func (c *containerd) endpoint() string { return "unix://" + c.socket }

func (c *containerd) stop() { c.proc.stop() }
