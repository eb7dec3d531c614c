package durabletest

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tree is every file (its mode and bytes), symbolic link (its target) and
// directory (its mode) under root, by path relative to root (a directory's
// with a trailing slash): what a test compares before and after a change to
// show that the change gave a tree back, byte for byte.
func Tree(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		require.NoError(t, err)
		switch {
		case d.IsDir():
			out[rel+"/"] = info.Mode().String()
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			require.NoError(t, err)
			out[rel] = "-> " + target
		default:
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			out[rel] = info.Mode().String() + " " + string(data)
		}
		return nil
	}))
	return out
}
