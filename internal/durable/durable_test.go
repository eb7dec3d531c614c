package durable_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/durable"
	"github.com/pullguard/pullguard/internal/durable/durabletest"
)

// TestWriteOrder shows the order of each form's operations: the data is
// written, the file fsynced and closed, renamed (or linked), and the
// directory fsynced, in that order; the options leave out exactly the
// steps they name.
func TestWriteOrder(t *testing.T) {
	const perm = 0o640 // not CreateTemp's 0600: the mode is set, umask or not
	for _, tc := range []struct {
		name string
		// old, if not nil, is at the path before the write.
		old   []byte
		write func(path string) error
		// want is the steps of each write at the path.
		want    [][]string
		wantErr error
		// wantData is what the path holds afterwards.
		wantData []byte
	}{{
		name:     "WriteFile replaces a file",
		old:      []byte("old"),
		write:    func(path string) error { return durable.WriteFile(path, []byte("new"), perm) },
		want:     [][]string{durabletest.Durable},
		wantData: []byte("new"),
	}, {
		name:     "WriteFile creates a file",
		write:    func(path string) error { return durable.WriteFile(path, []byte("new"), perm) },
		want:     [][]string{durabletest.Durable},
		wantData: []byte("new"),
	}, {
		name: "a Writer streams and commits",
		write: func(path string) error {
			w, err := durable.Create(path, perm)
			if err != nil {
				return err
			}
			defer w.Close()
			for _, chunk := range []string{"n", "e", "w"} {
				if _, err := w.Write([]byte(chunk)); err != nil {
					return err
				}
			}
			return w.Commit()
		},
		want:     [][]string{durabletest.Durable},
		wantData: []byte("new"),
	}, {
		name:     "NoSync skips both fsyncs",
		old:      []byte("old"),
		write:    func(path string) error { return durable.WriteFile(path, []byte("new"), perm, durable.NoSync()) },
		want:     [][]string{{"create", "chmod", "write", "close", "rename"}},
		wantData: []byte("new"),
	}, {
		name: "DeferDirSync leaves the directory to the caller's SyncDir",
		write: func(path string) error {
			if err := durable.WriteFile(path, []byte("new"), perm, durable.DeferDirSync()); err != nil {
				return err
			}
			return durable.SyncDir(filepath.Dir(path))
		},
		want:     [][]string{durabletest.Durable},
		wantData: []byte("new"),
	}, {
		name: "TempDir writes the temporary file elsewhere",
		write: func(path string) error {
			ingest := filepath.Join(filepath.Dir(path), "ingest")
			if err := os.Mkdir(ingest, 0o700); err != nil {
				return err
			}
			return durable.WriteFile(path, []byte("new"), perm, durable.TempDir(ingest))
		},
		want:     [][]string{durabletest.Durable},
		wantData: []byte("new"),
	}, {
		name:     "Exclusive links a new file",
		write:    func(path string) error { return durable.WriteFile(path, []byte("new"), perm, durable.Exclusive()) },
		want:     [][]string{{"create", "chmod", "write", "sync", "close", "link", "remove", "syncdir"}},
		wantData: []byte("new"),
	}, {
		name:     "Exclusive leaves an existing file",
		old:      []byte("old"),
		write:    func(path string) error { return durable.WriteFile(path, []byte("new"), perm, durable.Exclusive()) },
		wantErr:  fs.ErrExist,
		wantData: []byte("old"),
	}, {
		name: "Rename fsyncs the directory",
		write: func(path string) error {
			if err := os.WriteFile(path+".new", []byte("new"), perm); err != nil {
				return err
			}
			return durable.Rename(path+".new", path)
		},
		want:     [][]string{{"rename", "syncdir"}},
		wantData: []byte("new"),
	}, {
		name: "Rename with NoSync",
		write: func(path string) error {
			if err := os.WriteFile(path+".new", []byte("new"), perm); err != nil {
				return err
			}
			return durable.Rename(path+".new", path, durable.NoSync())
		},
		want:     [][]string{{"rename"}},
		wantData: []byte("new"),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "file")
			if tc.old != nil {
				require.NoError(t, os.WriteFile(path, tc.old, 0o600))
			}
			rec := durabletest.Record(t, dir)
			err := tc.write(path)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				assert.Contains(t, err.Error(), path, "the error names the file")
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.want, rec.Writes(path), "operations: %v", rec.Ops())
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.wantData, got)
			if tc.wantErr == nil && tc.old == nil {
				fi, err := os.Stat(path)
				require.NoError(t, err)
				assert.Equal(t, fs.FileMode(perm), fi.Mode().Perm())
			}
			_, tmp := durabletest.List(t, dir)
			assert.Empty(t, tmp, "temporary files left behind")
		})
	}
}

// faultFS fails one step with err.
type faultFS struct {
	durable.FS
	step string
	err  error
}

func (f *faultFS) fail(step string) error {
	if step == f.step {
		return f.err
	}
	return nil
}

func (f *faultFS) CreateTemp(dir, pattern string) (durable.File, error) {
	if err := f.fail(durabletest.StepCreate); err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	file, err := f.FS.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *faultFS) Rename(oldpath, newpath string) error {
	if err := f.fail(durabletest.StepRename); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return f.FS.Rename(oldpath, newpath)
}

func (f *faultFS) Link(oldpath, newpath string) error {
	if err := f.fail(durabletest.StepLink); err != nil {
		return &os.LinkError{Op: "link", Old: oldpath, New: newpath, Err: err}
	}
	return f.FS.Link(oldpath, newpath)
}

func (f *faultFS) SyncDir(dir string) error {
	if err := f.fail(durabletest.StepSyncDir); err != nil {
		return &fs.PathError{Op: "sync", Path: dir, Err: err}
	}
	return f.FS.SyncDir(dir)
}

type faultFile struct {
	durable.File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.fail(durabletest.StepWrite); err != nil {
		// A full disk takes what fits.
		n, _ := f.File.Write(p[:len(p)/2])
		return n, &fs.PathError{Op: "write", Path: f.Name(), Err: err}
	}
	return f.File.Write(p)
}

func (f *faultFile) Chmod(mode fs.FileMode) error {
	if err := f.fs.fail(durabletest.StepChmod); err != nil {
		return &fs.PathError{Op: "chmod", Path: f.Name(), Err: err}
	}
	return f.File.Chmod(mode)
}

func (f *faultFile) Sync() error {
	if err := f.fs.fail(durabletest.StepSync); err != nil {
		return &fs.PathError{Op: "sync", Path: f.Name(), Err: err}
	}
	return f.File.Sync()
}

func (f *faultFile) Close() error {
	err := f.File.Close()
	if ferr := f.fs.fail(durabletest.StepClose); ferr != nil {
		return &fs.PathError{Op: "close", Path: f.Name(), Err: ferr}
	}
	return err
}

// TestWriteFailures fails each step as a full disk, a read-only file
// system or a failing device would: the error names the file and wraps the
// system's, and the old file stands with no temporary file left, or, when
// only the directory's fsync failed, the new one is in place.
func TestWriteFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		step string
		err  error
		// exclusive writes with Exclusive, where no file was.
		exclusive bool
		wantNew   bool
	}{
		{name: "read-only file system", step: durabletest.StepCreate, err: syscall.EROFS},
		{name: "directory not writable", step: durabletest.StepCreate, err: syscall.EACCES},
		{name: "mode refused", step: durabletest.StepChmod, err: syscall.EPERM},
		{name: "full disk at the write", step: durabletest.StepWrite, err: syscall.ENOSPC},
		{name: "full disk at the fsync (delayed allocation)", step: durabletest.StepSync, err: syscall.ENOSPC},
		{name: "device error at the fsync", step: durabletest.StepSync, err: syscall.EIO},
		{name: "error at the close (NFS)", step: durabletest.StepClose, err: syscall.EIO},
		{name: "rename refused", step: durabletest.StepRename, err: syscall.EXDEV},
		{name: "link refused", step: durabletest.StepLink, err: syscall.EPERM, exclusive: true},
		{name: "directory fsync fails after the rename", step: durabletest.StepSyncDir, err: syscall.EIO, wantNew: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "file")
			old := []byte("old")
			var opts []durable.Option
			if tc.exclusive {
				opts = append(opts, durable.Exclusive())
			} else {
				require.NoError(t, os.WriteFile(path, old, 0o600))
			}
			t.Cleanup(durable.SetFS(&faultFS{FS: durable.OS(), step: tc.step, err: tc.err}))

			err := durable.WriteFile(path, bytes.Repeat([]byte("new"), 1000), 0o600, opts...)
			require.ErrorIs(t, err, tc.err)
			assert.Contains(t, err.Error(), path, "the error names the file")

			got, rerr := os.ReadFile(path)
			switch {
			case tc.wantNew:
				require.NoError(t, rerr)
				assert.Equal(t, bytes.Repeat([]byte("new"), 1000), got)
				assert.Contains(t, err.Error(), "may not survive a power loss")
			case tc.exclusive:
				assert.ErrorIs(t, rerr, fs.ErrNotExist, "nothing is created")
			default:
				require.NoError(t, rerr)
				assert.Equal(t, old, got, "the old file stands")
			}
			_, tmp := durabletest.List(t, dir)
			assert.Empty(t, tmp, "temporary files left behind")
		})
	}
}

// TestWriter shows the Writer's guards: Close discards what was not
// committed, a write error forbids the commit, and a committed or closed
// Writer writes nothing more.
func TestWriter(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, path string) error
	}{{
		name: "closed without a commit",
		run: func(t *testing.T, path string) error {
			w, err := durable.Create(path, 0o600)
			require.NoError(t, err)
			_, err = w.Write([]byte("half"))
			require.NoError(t, err)
			require.NoError(t, w.Close())
			_, err = w.Write([]byte("more"))
			return err
		},
	}, {
		name: "a write error forbids the commit",
		run: func(t *testing.T, path string) error {
			t.Cleanup(durable.SetFS(&faultFS{FS: durable.OS(), step: durabletest.StepWrite, err: syscall.ENOSPC}))
			w, err := durable.Create(path, 0o600)
			require.NoError(t, err)
			defer w.Close()
			_, err = w.Write([]byte("half"))
			require.ErrorIs(t, err, syscall.ENOSPC)
			return w.Commit()
		},
	}, {
		name: "committed twice",
		run: func(t *testing.T, path string) error {
			w, err := durable.Create(path, 0o600)
			require.NoError(t, err)
			require.NoError(t, w.Commit())
			require.NoError(t, os.Remove(path))
			return w.Commit()
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "file")
			err := tc.run(t, path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.NoFileExists(t, path)
			files, tmp := durabletest.List(t, dir)
			assert.Empty(t, append(files, tmp...), "nothing is left")
		})
	}
}

func TestIsTemp(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{name: ".hashkey.tmp-123", want: true},
		{name: "/var/lib/pullguard/.images.json.tmp-9", want: true},
		{name: ".tmp-leftover", want: true}, // the announcements' earlier name
		{name: "hashkey"},
		{name: "images.json.tmp-1"}, // not hidden: not ours
		{name: ".hidden"},
		{name: "0000000000000001-0000000000000002-00000003.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, durable.IsTemp(tc.name))
		})
	}
}

// TestTemporaryNames shows that the temporary file is named after the
// file, in the file's directory or TempDir, and that IsTemp knows it.
func TestTemporaryNames(t *testing.T) {
	dir := t.TempDir()
	ingest := filepath.Join(dir, "ingest")
	require.NoError(t, os.Mkdir(ingest, 0o700))
	for _, tc := range []struct {
		name    string
		opts    []durable.Option
		wantDir string
	}{
		{name: "beside the file", wantDir: dir},
		{name: "in TempDir", opts: []durable.Option{durable.TempDir(ingest)}, wantDir: ingest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "blob")
			w, err := durable.Create(path, 0o600, tc.opts...)
			require.NoError(t, err)
			defer w.Close()
			matches, err := filepath.Glob(filepath.Join(tc.wantDir, ".blob.tmp-*"))
			require.NoError(t, err)
			require.Len(t, matches, 1)
			assert.True(t, durable.IsTemp(matches[0]))
		})
	}
}

// TestSetFSIsForTestsOnly: no file of the repository but tests and
// durabletest replaces the file system the package writes through (and
// docs/imports.txt keeps durabletest out of every product package).
func TestSetFSIsForTestsOnly(t *testing.T) {
	root := filepath.Join("..", "..")
	var callers []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte("SetFS(")) {
			callers = append(callers, path)
		}
		return nil
	})
	require.NoError(t, err)
	here := filepath.Join(root, "internal", "durable")
	assert.Equal(t, []string{
		filepath.Join(here, "durabletest", "crash.go"),
		filepath.Join(here, "durabletest", "record.go"),
		filepath.Join(here, "fs.go"), // where it is defined
	}, callers)
}
