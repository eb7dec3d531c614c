//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// daemon is one `pullguard serve` child process.
type daemon struct {
	cmd     *exec.Cmd
	socket  string
	metrics string
	logPath string
	started time.Time
	exited  chan struct{}
}

// startServe starts `pullguard serve` on a new socket in sockDir against
// the runtime's socket, with root as --root-dir and an empty kubelet root
// directory, metrics on a free loopback port, at its default verbosity.
// The child gets SIGKILL if this process dies (Pdeathsig); stop it with
// stop.
func startServe(bin, root, sockDir, runtimeSocket string) (*daemon, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	kubeletRoot := filepath.Join(root, "kubelet-root")
	if err := os.MkdirAll(kubeletRoot, 0o700); err != nil {
		return nil, err
	}
	d := &daemon{socket: filepath.Join(sockDir, "pg.sock"), metrics: fmt.Sprintf("127.0.0.1:%d", port),
		logPath: filepath.Join(root, "serve.log"), exited: make(chan struct{})}
	_ = os.Remove(d.socket)
	logf, err := os.Create(d.logPath)
	if err != nil {
		return nil, err
	}
	d.cmd = exec.Command(bin, "serve",
		"--listen", "unix://"+d.socket,
		"--image-service-endpoint", "unix://"+runtimeSocket,
		"--root-dir", root,
		"--kubelet-root-dir", kubeletRoot,
		"--admin-socket", filepath.Join(root, "admin.sock"),
		"--metrics-bind-address", d.metrics)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d.started = time.Now()
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { _ = d.cmd.Wait(); logf.Close(); close(d.exited) }()
	return d, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// stop sends SIGTERM to the child by its PID and waits for it to exit,
// then SIGKILL after 20 s.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// logTail is the end of serve's log, for errors.
func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// firstAnswer waits for serve's socket, then asks ImageFsInfo (what
// k8s.io/cri-client asks first when the kubelet connects), waiting for
// the server to be ready, and returns the time from the child's start to
// the answer. serve listens before it opens its store and starts serving
// after, so the answer comes once the store is loaded.
func (d *daemon) firstAnswer(ctx context.Context) (time.Duration, *grpc.ClientConn, error) {
	for {
		if _, err := os.Stat(d.socket); err == nil {
			break
		}
		select {
		case <-d.exited:
			return 0, nil, fmt.Errorf("serve exited before it listened: %s", d.logTail())
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	bc := backoff.DefaultConfig
	bc.BaseDelay, bc.MaxDelay = time.Millisecond, 5*time.Millisecond
	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"), grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: time.Minute}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return 0, nil, err
	}
	_, err = runtimeapi.NewImageServiceClient(conn).ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}, grpc.WaitForReady(true))
	took := time.Since(d.started)
	if err != nil {
		conn.Close()
		return 0, nil, fmt.Errorf("serve's first answer: %w: %s", err, d.logTail())
	}
	return took, conn, nil
}

// procStats is what the kernel says of a process.
type procStats struct {
	rss, hwm, anon, file int64         // VmRSS, VmHWM, RssAnon, RssFile, bytes
	cpu                  time.Duration // utime + stime
}

func readProc(pid int) (procStats, error) {
	var s procStats
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &s.rss
		case "VmHWM":
			dst = &s.hwm
		case "RssAnon":
			dst = &s.anon
		case "RssFile":
			dst = &s.file
		default:
			continue
		}
		f := strings.Fields(v) // "12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			return s, fmt.Errorf("/proc/%d/status: unexpected %s line %q", pid, k, v)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return s, err
		}
		*dst = n << 10
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// After the command's closing parenthesis: state is field 3, utime
	// and stime are fields 14 and 15.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s, err
		}
		ticks += n
	}
	s.cpu = time.Duration(ticks) * time.Second / clockTicks
	return s, nil
}

// metric is the sum of the samples of serve's /metrics whose series starts
// with prefix.
func (d *daemon) metric(prefix string) (float64, error) {
	resp, err := http.Get("http://" + d.metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	found := false
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			return 0, err
		}
		sum += v
		found = true
	}
	if !found {
		return 0, errors.New("serve's /metrics has no " + prefix)
	}
	return sum, nil
}

// topMappings returns the n mappings of the process with the most resident
// memory, from /proc/PID/smaps: what RSS is made of.
func topMappings(pid, n int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return "", err
	}
	type mapping struct {
		name string
		rss  int64
	}
	var maps []mapping
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			name := "[anonymous]"
			if len(f) >= 6 {
				name = f[5]
			}
			maps = append(maps, mapping{name: name + " " + f[1]})
		case len(f) == 3 && f[0] == "Rss:" && len(maps) > 0:
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			maps[len(maps)-1].rss = kb << 10
		}
	}
	slices.SortFunc(maps, func(a, b mapping) int { return int(b.rss - a.rss) })
	var sb strings.Builder
	for _, m := range maps[:min(n, len(maps))] {
		fmt.Fprintf(&sb, "    %7.1f MiB  %s\n", float64(m.rss)/(1<<20), m.name)
	}
	return sb.String(), nil
}

// saveHeapProfile saves serve's heap profile (after a GC) as dir/name,
// when dir is set.
func (d *daemon) saveHeapProfile(dir, name string) error {
	if dir == "" {
		return nil
	}
	resp, err := http.Get("http://" + d.metrics + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("serve's /debug/pprof/heap: %s (-pprof needs a serve build that serves it)", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), body, 0o644)
}
