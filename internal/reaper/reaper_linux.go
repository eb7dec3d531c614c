//go:build linux

package reaper

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reaperEnv marks the executable started again as a reaper; its value is
// the pid of the process that started it.
const reaperEnv = "PULLGUARD_PLUGIN_REAPER"

// reaperExe is how the reaper is started: the running executable, even
// when its file was replaced or deleted since.
const reaperExe = "/proc/self/exe"

// Exit statuses and messages of the reaper itself.
const (
	reaperExitSignaled = 125 // told to stop before the plugin exited
	// ExitStart is the reaper's status when the program could not be
	// started; its stderr then starts with StartFailure and the cause.
	ExitStart          = 126
	StartFailure       = "pullguard-plugin-reaper: cannot start: "
	reaperCleanupLimit = 10 * time.Second
)

// Supported says whether Command runs programs under a reaper here.
const Supported = true

func init() {
	if os.Getenv(reaperEnv) != "" {
		// syscall.Exit skips the exit hooks (the race detector's sleeps a
		// second at exit); the reaper has nothing buffered to flush.
		syscall.Exit(reaperMain(os.Args[1:]))
	}
}

// Command returns the command that runs path with args under a reaper, and
// the environment to give it (env, plus the reaper's marker, which the
// program does not see). Start it in its own process group; stop it early
// with Stop, never with SIGKILL (its descendants would go to init).
func Command(path string, args, env []string) (*exec.Cmd, []string) {
	cmd := exec.Command(reaperExe, append([]string{"--", path}, args...)...)
	cmd.Args[0] = "pullguard-plugin-reaper"
	return cmd, append(append([]string(nil), env...), reaperEnv+"="+strconv.Itoa(os.Getpid()))
}

// Stop asks the reaper pid to kill its program and everything below it,
// and exit.
func Stop(pid int) { _ = syscall.Kill(pid, syscall.SIGTERM) }

// reaperMain is the reaper process: args is "--", the program and its
// arguments. It returns the plugin's exit status (re-raising the signal
// that killed it) after no descendant is left.
func reaperMain(args []string) int {
	if len(args) < 2 || args[0] != "--" {
		return 2
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// Die with the pullguard that started this reaper (and clean up).
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0)
	if strconv.Itoa(os.Getppid()) != os.Getenv(reaperEnv) {
		return reaperExitSignaled // the parent died before the line above
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 2
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, reaperEnv+"=") {
			env = append(env, kv)
		}
	}
	plugin := exec.Command(args[1], args[2:]...)
	plugin.Env = env
	plugin.Stdin, plugin.Stdout, plugin.Stderr = os.Stdin, os.Stdout, os.Stderr
	plugin.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := plugin.Start(); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the cause only, not the path
		}
		_, _ = os.Stderr.WriteString(StartFailure + err.Error() + "\n")
		return ExitStart
	}
	// The reaper's own descriptors would keep the pipes open.
	_ = os.Stdin.Close()
	_ = os.Stdout.Close()
	_ = os.Stderr.Close()

	exited := make(chan *os.ProcessState, 1)
	go func() {
		st, _ := plugin.Process.Wait()
		exited <- st
	}()
	var st *os.ProcessState
	select {
	case st = <-exited:
	case <-stop:
	}
	// Every process below is a child of the reaper or becomes one when its
	// parent is killed. (No group kill: once the plugin is reaped its pid
	// may name another process group.)
	killDescendants()
	if st == nil {
		return reaperExitSignaled
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		signal.Reset(ws.Signal())
		_ = syscall.Kill(os.Getpid(), ws.Signal())
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// killDescendants kills and reaps the reaper's children until it has none:
// each killed child's own children are re-parented to the reaper (a
// subreaper) and found on the next round. It gives up after
// reaperCleanupLimit (a process stuck in the kernel cannot be killed).
func killDescendants() {
	self := os.Getpid()
	deadline := time.Now().Add(reaperCleanupLimit)
	for time.Now().Before(deadline) {
		for _, pid := range childrenOf(self) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case err == syscall.ECHILD:
			return // nothing is left below the reaper
		case pid > 0 || err == syscall.EINTR:
			continue // one reaped: look again
		}
		// Children are left that have not died yet (just killed, or just
		// re-parented here): look again shortly.
		time.Sleep(time.Millisecond)
	}
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppidOf(child) == pid {
			out = append(out, child)
		}
	}
	return out
}

// ppidOf reads the parent pid from /proc/<pid>/stat (the fourth field,
// after the parenthesized command name, which may hold spaces).
func ppidOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}
