package durable

import (
	"io/fs"
	"os"
	"sync/atomic"
)

// FS is what the package writes through: the operating system's (OS), or,
// in a test, a layer that records or interrupts each operation.
type FS interface {
	// CreateTemp creates a new file in dir, as os.CreateTemp does (mode
	// 0600, "*" in pattern replaced by random digits).
	CreateTemp(dir, pattern string) (File, error)
	Rename(oldpath, newpath string) error
	Link(oldpath, newpath string) error
	Remove(name string) error
	// SyncDir fsyncs the directory dir.
	SyncDir(dir string) error
}

// File is an open temporary file (an *os.File on the operating system).
type File interface {
	Name() string
	Write(p []byte) (int, error)
	Chmod(mode fs.FileMode) error
	Sync() error
	Close() error
}

type osFS struct{}

var _ FS = osFS{}

// OS returns the operating system's FS.
func OS() FS { return osFS{} }

func (osFS) CreateTemp(dir, pattern string) (File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		// A nil *os.File in a File would not be a nil File.
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }
func (osFS) Link(oldpath, newpath string) error   { return os.Link(oldpath, newpath) }
func (osFS) Remove(name string) error             { return os.Remove(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// installed is the FS a test set, nil for the operating system's.
var installed atomic.Pointer[FS]

func current() FS {
	if p := installed.Load(); p != nil {
		return *p
	}
	return osFS{}
}

// SetFS makes every later write of the package, in the whole process, go
// through fsys, until restore is called (which puts back the FS before).
// It is for tests (package durabletest); product code never calls it. A
// test that sets it must not run in parallel with another that does.
func SetFS(fsys FS) (restore func()) {
	prev := installed.Swap(&fsys)
	return func() { installed.Store(prev) }
}
