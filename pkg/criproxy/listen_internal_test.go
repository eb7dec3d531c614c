package criproxy

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSocketNeverReachableBeforeItsMode: between binding the socket and
// setting its mode, no other user can connect, whatever the process's
// umask (a client that connects in that moment keeps its connection after
// the chmod). With umask 0 a socket bound at its final path is 0777 until
// the chmod; so nothing may appear at the final path before it has
// SocketMode, and the bound socket must sit in a directory only the owner
// can enter.
func TestSocketNeverReachableBeforeItsMode(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	dir, err := os.MkdirTemp("", "pgls")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "pg.sock")

	var checked bool
	afterBind = func(bound string) {
		checked = true
		if fi, err := os.Lstat(path); err == nil {
			assert.Equal(t, fs.FileMode(SocketMode), fi.Mode().Perm(), "the socket is reachable at its path before its mode is set")
		}
		if bound != path {
			fi, err := os.Stat(filepath.Dir(bound))
			require.NoError(t, err)
			assert.Equal(t, fs.FileMode(0o700), fi.Mode().Perm(), "the bound socket's directory must be the owner's only")
		}
	}
	t.Cleanup(func() { afterBind = nil })

	l, err := Listen(path)
	require.NoError(t, err)
	assert.True(t, checked)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(SocketMode), fi.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing is left beside the socket")
	require.NoError(t, l.Close())
	assert.NoFileExists(t, path)
}
