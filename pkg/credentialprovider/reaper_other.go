//go:build !linux

package credentialprovider

import (
	"os/exec"
	"syscall"
)

// Without Linux's child subreapers a plugin runs directly in its own
// process group, and only that group is killed: descendants that called
// setsid can outlive a run.
const (
	reaperExitStart    = -2 // never returned
	reaperStartFailure = "\x00"
)

func reaped(path string, args, env []string) (*exec.Cmd, []string) {
	return exec.Command(path, args...), env
}

func stopReaper(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
