//go:build !linux

package reaper

import (
	"os/exec"
	"syscall"
)

// Without Linux's child subreapers a program runs directly in its own
// process group, and only that group is killed: descendants that called
// setsid can outlive it.
const (
	ExitStart    = -2 // never returned
	StartFailure = "\x00"
	Supported    = false
)

// Command returns the command that runs path with args directly.
func Command(path string, args, env []string) (*exec.Cmd, []string) {
	return exec.Command(path, args...), env
}

// Stop kills the program's process group.
func Stop(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
