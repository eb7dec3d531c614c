package durabletest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/durable"
	"github.com/pullguard/pullguard/internal/durable/durabletest"
)

// TestWrites shows how Writes attributes operations when several files
// of one directory are written: each write gets the steps on its own
// temporary file and the first fsync of the directory after its rename.
func TestWrites(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, dir string)
		want  map[string][][]string
	}{{
		// b's data is not fsynced; its rename is, by the fsync of the
		// directory after a's second write.
		name: "one file written twice, another beside it without fsync",
		write: func(t *testing.T, dir string) {
			require.NoError(t, durable.WriteFile(filepath.Join(dir, "a"), []byte("1"), 0o600))
			require.NoError(t, durable.WriteFile(filepath.Join(dir, "b"), []byte("1"), 0o600, durable.NoSync()))
			require.NoError(t, durable.WriteFile(filepath.Join(dir, "a"), []byte("2"), 0o600))
		},
		want: map[string][][]string{
			"a": {durabletest.Durable, durabletest.Durable},
			"b": {{durabletest.StepCreate, durabletest.StepChmod, durabletest.StepWrite, durabletest.StepClose, durabletest.StepRename, durabletest.StepSyncDir}},
		},
	}, {
		name: "two files, one fsync of the directory",
		write: func(t *testing.T, dir string) {
			for _, name := range []string{"a", "b"} {
				require.NoError(t, durable.WriteFile(filepath.Join(dir, name), []byte(name), 0o600, durable.DeferDirSync()))
			}
			require.NoError(t, durable.SyncDir(dir))
		},
		want: map[string][][]string{"a": {durabletest.Durable}, "b": {durabletest.Durable}},
	}, {
		name: "a file outside the recorded directory",
		write: func(t *testing.T, dir string) {
			require.NoError(t, durable.WriteFile(filepath.Join(t.TempDir(), "a"), []byte("1"), 0o600))
		},
		want: map[string][][]string{"a": nil},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rec := durabletest.Record(t, dir)
			tc.write(t, dir)
			for name, want := range tc.want {
				assert.Equal(t, want, rec.Writes(filepath.Join(dir, name)), "%s: %v", name, rec.Ops())
			}
		})
	}
}

// TestList tells the files of a directory from temporary files.
func TestList(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"images.json", ".images.json.tmp-1", ".hidden"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	}
	files, tmp := durabletest.List(t, dir)
	assert.ElementsMatch(t, []string{"images.json", ".hidden"}, files)
	assert.Equal(t, []string{".images.json.tmp-1"}, tmp)
}
