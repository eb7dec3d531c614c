package durable_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/durable"
	"github.com/pullguard/pullguard/internal/durable/durabletest"
)

// TestCrash kills the writer after each of its steps (a child process,
// SIGKILL) and shows that the path holds the old file until the rename and
// the new one from it on, whole, never a mix; that nothing else is left in
// the directory but temporary files IsTemp names, which no reader of the
// path opens; and that a file another process created first stands.
func TestCrash(t *testing.T) {
	old := bytes.Repeat([]byte("old "), 16<<10) // 64 KiB
	new := bytes.Repeat([]byte("NEW!"), 24<<10) // 96 KiB: a mix shows in the size
	write := func(opts ...durable.Option) func(dir string) error {
		return func(dir string) error { return durable.WriteFile(filepath.Join(dir, "file"), new, 0o600, opts...) }
	}
	for _, tc := range []struct {
		name string
		// old says the old file is there before the write.
		old   bool
		write func(dir string) error
		// want is what the path holds once the write completed.
		want []byte
	}{{
		name:  "WriteFile replaces a file",
		old:   true,
		write: write(),
		want:  new,
	}, {
		name:  "WriteFile creates a file",
		write: write(),
		want:  new,
	}, {
		name: "a Writer streams in chunks",
		old:  true,
		write: func(dir string) error {
			w, err := durable.Create(filepath.Join(dir, "file"), 0o600)
			if err != nil {
				return err
			}
			defer w.Close()
			for chunk := range slices.Chunk(new, len(new)/3) {
				if _, err := w.Write(chunk); err != nil {
					return err
				}
			}
			return w.Commit()
		},
		want: new,
	}, {
		name:  "NoSync",
		old:   true,
		write: write(durable.NoSync()),
		want:  new,
	}, {
		name: "TempDir and DeferDirSync",
		old:  true,
		write: func(dir string) error {
			ingest := filepath.Join(dir, "ingest")
			if err := os.MkdirAll(ingest, 0o700); err != nil {
				return err
			}
			if err := durable.WriteFile(filepath.Join(dir, "file"), new, 0o600, durable.TempDir(ingest), durable.DeferDirSync()); err != nil {
				return err
			}
			return durable.SyncDir(dir)
		},
		want: new,
	}, {
		name:  "Exclusive creates a file",
		write: write(durable.Exclusive()),
		want:  new,
	}, {
		name: "Exclusive leaves a file another process made",
		old:  true,
		write: func(dir string) error {
			if err := write(durable.Exclusive())(dir); !errors.Is(err, fs.ErrExist) {
				return err
			}
			return nil
		},
		want: old,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			seenNew := false
			durabletest.Crash(t, durabletest.CrashCase{
				Setup: func(t *testing.T, dir string) {
					if tc.old {
						require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), old, 0o600))
					}
				},
				Write: tc.write,
				Check: func(t *testing.T, dir string, o durabletest.Outcome) {
					got, err := os.ReadFile(filepath.Join(dir, "file"))
					switch {
					case !o.Killed:
						require.NoError(t, err)
						assert.Equal(t, tc.want, got, "the completed write")
					case errors.Is(err, fs.ErrNotExist):
						assert.False(t, tc.old, "the old file is gone")
						assert.False(t, seenNew, "the new file was there after an earlier step")
					default:
						require.NoError(t, err)
						switch {
						case bytes.Equal(got, new):
							seenNew = true
						case tc.old && bytes.Equal(got, old):
							assert.False(t, seenNew, "the old file is back after the new one was in place")
						default:
							t.Errorf("the file is neither the old nor the new one: %d bytes", len(got))
						}
					}
					files, _ := durabletest.List(t, dir)
					assert.Subset(t, []string{"file", "ingest"}, files, "nothing but the file and temporary files")
					if slices.Contains(files, "ingest") {
						files, _ := durabletest.List(t, filepath.Join(dir, "ingest"))
						assert.Empty(t, files, "nothing but temporary files in ingest/")
					}
				},
			})
			if !bytes.Equal(tc.want, old) {
				assert.True(t, seenNew, "some kill came after the rename")
			}
		})
	}
}
