// Package dirlock holds the lock that gives one process at a time a
// directory: an exclusive, non-blocking flock(2) on a lock file in it, which
// the kernel releases when the process ends however it ends. The holder
// writes its process ID into the file, so a second process can say who holds
// the directory.
//
// pkg/podworkers locks a node's root directory with it and pkg/criruntime
// the embedded runtime's state directory; it depends on the standard library
// only.
package dirlock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrHeld: another process (or another open of the lock in this process)
// holds the directory.
var ErrHeld = errors.New("directory in use")

// HeldError says who holds a directory. It matches ErrHeld.
type HeldError struct {
	Dir, Path string
	// Holder is "process <pid>", or "another process (pid unknown)".
	Holder string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is held by %s (lock file %s)", e.Dir, e.Holder, e.Path)
}

// Is makes errors.Is(err, ErrHeld) hold.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Lock is a held directory lock.
type Lock struct {
	f *os.File
}

// Acquire takes the lock file name in dir (created when missing) at once,
// or fails with an error wrapping ErrHeld that names the holder's process
// ID. dir must exist. Acquire writes nothing else in dir.
func Acquire(dir, name string) (*Lock, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("failed to open lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := holderOf(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &HeldError{Dir: dir, Path: path, Holder: holder}
		}
		return nil, fmt.Errorf("failed to lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// holderOf reads the holder's process ID from the lock file. Only digits
// are ever printed, whatever the file holds.
func holderOf(f *os.File) string {
	b, _ := io.ReadAll(io.LimitReader(f, 32))
	s := strings.TrimSpace(string(b))
	if pid, err := strconv.Atoi(s); err == nil && pid > 0 {
		return "process " + strconv.Itoa(pid)
	}
	return "another process (pid unknown)"
}

// Release unlocks and closes the lock file; the file stays, so that a
// process waiting to take it never races one that removes it.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor releases the flock
	l.f = nil
	return err
}
