package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// Option changes how a file is written.
type Option func(*options)

type options struct {
	noSync, deferDirSync, exclusive bool
	tempDir                         string
}

// NoSync skips both fsyncs: the file replaces the old one atomically
// against a crash of the process, but not durably against a power loss.
// Only for a file whose loss costs nothing and whose reader refuses a torn
// one.
func NoSync() Option { return func(o *options) { o.noSync = true } }

// DeferDirSync skips the fsync of the directory after the rename: the
// caller calls SyncDir on it itself, after several files, and before
// anything durable refers to them. Until then, a power loss may lose them.
func DeferDirSync() Option { return func(o *options) { o.deferDirSync = true } }

// Exclusive creates path only if it does not exist, by a link rather than
// a rename; otherwise the error wraps fs.ErrExist and the existing file
// stands. For a file that several processes may create at once and that
// all must agree on.
func Exclusive() Option { return func(o *options) { o.exclusive = true } }

// TempDir makes the temporary file in dir rather than beside path. dir
// must be on path's file system; a crash may leave a temporary file there.
func TempDir(dir string) Option { return func(o *options) { o.tempDir = dir } }

// WriteFile writes data to path with mode perm, atomically and durably
// (see the package documentation for each step and what a crash at each
// leaves).
func WriteFile(path string, data []byte, perm fs.FileMode, opts ...Option) error {
	w, err := Create(path, perm, opts...)
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := w.Write(data); err != nil {
		return err
	}
	return w.Commit()
}

// IsTemp reports whether the base name of name is that of a temporary file
// of this package: a file being written, or left by a writer that crashed.
func IsTemp(name string) bool {
	base := filepath.Base(name)
	return strings.HasPrefix(base, ".") && strings.Contains(base, tempInfix)
}

const tempInfix = ".tmp-"

// Writer is a file being written: nothing is at its path until Commit.
type Writer struct {
	fsys FS
	path string
	opts options
	// f is the temporary file, nil once committed or closed.
	f File
	// err is the first write error; Commit refuses after one.
	err error
}

// Create starts writing path with mode perm: it creates the temporary file
// (steps 1 and 2 of the package documentation). Write fills it, Commit
// puts it in place; Close discards it unless it was committed, so
// `defer w.Close()` cleans up after any failure.
func Create(path string, perm fs.FileMode, opts ...Option) (*Writer, error) {
	w := &Writer{fsys: current(), path: path}
	for _, opt := range opts {
		opt(&w.opts)
	}
	dir := w.opts.tempDir
	if dir == "" {
		dir = filepath.Dir(path)
	}
	f, err := w.fsys.CreateTemp(dir, "."+filepath.Base(path)+tempInfix+"*")
	if err != nil {
		return nil, fmt.Errorf("failed to create a temporary file in %s for %s: %w", dir, path, err)
	}
	w.f = f
	if err := f.Chmod(perm); err != nil {
		w.discard()
		return nil, fmt.Errorf("failed to set mode %v on %s, the temporary file for %s: %w", perm, f.Name(), path, err)
	}
	return w, nil
}

// Write writes p to the temporary file.
func (w *Writer) Write(p []byte) (int, error) {
	if w.f == nil {
		return 0, fmt.Errorf("failed to write %s: %w", w.path, fs.ErrClosed)
	}
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.f.Write(p)
	if err != nil {
		w.err = fmt.Errorf("failed to write %s, the temporary file for %s: %w", w.f.Name(), w.path, err)
		return n, w.err
	}
	return n, nil
}

// Commit fsyncs the temporary file, closes it, renames (or, with
// Exclusive, links) it at path and fsyncs the directory (steps 4 to 7). On
// any failure before the rename, the temporary file is removed and path is
// left as it was. After a write error it commits nothing and returns that
// error.
func (w *Writer) Commit() error {
	if w.f == nil {
		return fmt.Errorf("failed to commit %s: %w", w.path, fs.ErrClosed)
	}
	if w.err != nil {
		w.discard()
		return w.err
	}
	f, tmp := w.f, w.f.Name()
	w.f = nil
	if !w.opts.noSync {
		if err := f.Sync(); err != nil {
			f.Close()
			w.fsys.Remove(tmp)
			return fmt.Errorf("failed to sync %s, the temporary file for %s: %w", tmp, w.path, err)
		}
	}
	if err := f.Close(); err != nil {
		w.fsys.Remove(tmp)
		return fmt.Errorf("failed to close %s, the temporary file for %s: %w", tmp, w.path, err)
	}
	var exists error
	if w.opts.exclusive {
		err := w.fsys.Link(tmp, w.path)
		w.fsys.Remove(tmp)
		switch {
		case errors.Is(err, fs.ErrExist):
			exists = fmt.Errorf("%s exists already: %w", w.path, fs.ErrExist)
		case err != nil:
			return fmt.Errorf("failed to link %s at %s: %w", tmp, w.path, err)
		}
	} else if err := w.fsys.Rename(tmp, w.path); err != nil {
		w.fsys.Remove(tmp)
		return fmt.Errorf("failed to rename %s to %s: %w", tmp, w.path, err)
	}
	if !w.opts.noSync && !w.opts.deferDirSync {
		if err := syncParent(w.fsys, w.path); err != nil {
			return err
		}
	}
	return exists
}

// syncParent fsyncs the directory of path, just renamed or linked.
func syncParent(fsys FS, path string) error {
	dir := filepath.Dir(path)
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("%s is in place but may not survive a power loss: failed to sync directory %s: %w", path, dir, err)
	}
	return nil
}

// Close discards the file unless it was committed: the temporary file is
// closed and removed, and path is left as it was. After Commit it does
// nothing.
func (w *Writer) Close() error {
	if w.f == nil {
		return nil
	}
	return w.discard()
}

func (w *Writer) discard() error {
	f := w.f
	w.f = nil
	f.Close()
	if err := w.fsys.Remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("failed to remove %s, the temporary file for %s: %w", f.Name(), w.path, err)
	}
	return nil
}

// Rename renames oldpath to newpath and fsyncs newpath's directory, so the
// rename survives a power loss once Rename returns. The caller has made
// oldpath's contents durable before (a bbolt file commits its own). With
// NoSync or DeferDirSync the directory is not fsynced; other options do
// not apply.
func Rename(oldpath, newpath string, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	fsys := current()
	if err := fsys.Rename(oldpath, newpath); err != nil {
		return fmt.Errorf("failed to rename %s to %s: %w", oldpath, newpath, err)
	}
	if o.noSync || o.deferDirSync {
		return nil
	}
	return syncParent(fsys, newpath)
}

// SyncDir fsyncs the directory dir: the renames into it so far survive a
// power loss once it returns.
func SyncDir(dir string) error {
	if err := current().SyncDir(dir); err != nil {
		return fmt.Errorf("failed to sync directory %s: %w", dir, err)
	}
	return nil
}
