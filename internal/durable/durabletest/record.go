package durabletest

import (
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pullguard/pullguard/internal/durable"
)

// The steps an Op records.
const (
	StepCreate  = "create"
	StepChmod   = "chmod"
	StepWrite   = "write"
	StepSync    = "sync"
	StepClose   = "close"
	StepRename  = "rename"
	StepLink    = "link"
	StepRemove  = "remove"
	StepSyncDir = "syncdir"
)

// Op is one operation of package durable on the file system.
type Op struct {
	Step string
	// Path is the file or directory: for StepCreate, the temporary file
	// made; for StepRename and StepLink, the old name.
	Path string
	// To is the new name of StepRename and StepLink.
	To string
}

func (o Op) String() string {
	if o.To != "" {
		return o.Step + " " + o.Path + " " + o.To
	}
	return o.Step + " " + o.Path
}

// interposer wraps the operating system's FS and calls see after each
// operation under root that succeeded.
type interposer struct {
	root string
	see  func(Op)
}

func (i *interposer) under(path string) bool {
	rel, err := filepath.Rel(i.root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func (i *interposer) done(op Op, err error) error {
	if err == nil && (i.under(op.Path) || i.under(op.To)) {
		i.see(op)
	}
	return err
}

func (i *interposer) CreateTemp(dir, pattern string) (durable.File, error) {
	f, err := durable.OS().CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	i.done(Op{Step: StepCreate, Path: f.Name()}, nil)
	return &interposedFile{File: f, i: i}, nil
}

func (i *interposer) Rename(oldpath, newpath string) error {
	return i.done(Op{Step: StepRename, Path: oldpath, To: newpath}, durable.OS().Rename(oldpath, newpath))
}

func (i *interposer) Link(oldpath, newpath string) error {
	return i.done(Op{Step: StepLink, Path: oldpath, To: newpath}, durable.OS().Link(oldpath, newpath))
}

func (i *interposer) Remove(name string) error {
	return i.done(Op{Step: StepRemove, Path: name}, durable.OS().Remove(name))
}

func (i *interposer) SyncDir(dir string) error {
	return i.done(Op{Step: StepSyncDir, Path: dir}, durable.OS().SyncDir(dir))
}

type interposedFile struct {
	durable.File
	i *interposer
}

func (f *interposedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.i.done(Op{Step: StepWrite, Path: f.Name()}, err)
}

func (f *interposedFile) Chmod(mode fs.FileMode) error {
	return f.i.done(Op{Step: StepChmod, Path: f.Name()}, f.File.Chmod(mode))
}

func (f *interposedFile) Sync() error {
	return f.i.done(Op{Step: StepSync, Path: f.Name()}, f.File.Sync())
}

func (f *interposedFile) Close() error {
	return f.i.done(Op{Step: StepClose, Path: f.Name()}, f.File.Close())
}

// Recorder lists the operations package durable made under one directory.
type Recorder struct {
	mu  sync.Mutex
	ops []Op
}

// Record makes package durable record every operation under root that
// succeeded, until the test ends.
func Record(t testing.TB, root string) *Recorder {
	r := &Recorder{}
	t.Cleanup(durable.SetFS(&interposer{root: root, see: func(op Op) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ops = append(r.ops, op)
	}}))
	return r
}

// Ops returns the operations so far, in order.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Index returns the position in Ops of the first operation step on path
// (for StepRename and StepLink, to path) at or after from, or -1.
func (r *Recorder) Index(step, path string, from int) int {
	ops := r.Ops()
	for i := max(from, 0); i < len(ops); i++ {
		if ops[i].Step == step && (ops[i].Path == path || ops[i].To == path) {
			return i
		}
	}
	return -1
}

// Writes returns the steps of each write of path, in order, one list per
// rename or link at path: the steps on its temporary file (consecutive
// writes as one StepWrite), the rename or link, and what followed it for
// that write: the removal of the temporary name and the first fsync of
// path's directory, whoever made it (an fsync of a directory makes every
// rename in it durable).
func (r *Recorder) Writes(path string) [][]string {
	ops := r.Ops()
	var writes [][]string
	for i, op := range ops {
		if (op.Step != StepRename && op.Step != StepLink) || op.To != path {
			continue
		}
		var steps []string
		for _, prev := range ops[:i] {
			if prev.Path != op.Path || (prev.Step == StepWrite && len(steps) > 0 && steps[len(steps)-1] == StepWrite) {
				continue
			}
			steps = append(steps, prev.Step)
		}
		steps = append(steps, op.Step)
		for _, next := range ops[i+1:] {
			if next.Step == StepRemove && next.Path == op.Path {
				steps = append(steps, StepRemove)
			}
			if next.Step == StepSyncDir && next.Path == filepath.Dir(path) {
				steps = append(steps, StepSyncDir)
				break
			}
		}
		writes = append(writes, steps)
	}
	return writes
}

// Durable is the steps of a durable replacement (WriteFile's).
var Durable = []string{StepCreate, StepChmod, StepWrite, StepSync, StepClose, StepRename, StepSyncDir}
