package criproxy_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/criproxy"
)

func TestListen(t *testing.T) {
	t.Run("socket mode and removal", func(t *testing.T) {
		path := filepath.Join(socketDir(t), "sub", "pg.sock")
		l, err := criproxy.Listen(path)
		require.NoError(t, err)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(criproxy.SocketMode), fi.Mode().Perm())
		require.NoError(t, l.Close())
		assert.NoFileExists(t, path)
	})
	t.Run("a stale socket is replaced", func(t *testing.T) {
		path := filepath.Join(socketDir(t), "pg.sock")
		stale, err := net.Listen("unix", path)
		require.NoError(t, err)
		stale.(*net.UnixListener).SetUnlinkOnClose(false)
		require.NoError(t, stale.Close())
		require.FileExists(t, path)
		l, err := criproxy.Listen(path)
		require.NoError(t, err)
		require.NoError(t, l.Close())
	})
	t.Run("a live socket is not replaced", func(t *testing.T) {
		path := filepath.Join(socketDir(t), "pg.sock")
		live, err := net.Listen("unix", path)
		require.NoError(t, err)
		defer live.Close()
		_, err = criproxy.Listen(path)
		assert.ErrorIs(t, err, criproxy.ErrInUse)
	})
	t.Run("a file that is not a socket is not replaced", func(t *testing.T) {
		path := filepath.Join(socketDir(t), "pg.sock")
		require.NoError(t, os.WriteFile(path, []byte("data"), 0o600))
		_, err := criproxy.Listen(path)
		assert.ErrorContains(t, err, "not a socket")
		assert.FileExists(t, path)
	})
}

func TestLockRoot(t *testing.T) {
	root := t.TempDir()
	first, err := criproxy.LockRoot(root)
	require.NoError(t, err)
	_, err = criproxy.LockRoot(root)
	assert.ErrorIs(t, err, criproxy.ErrInUse, "a second instance is refused")
	require.NoError(t, first.Close())
	again, err := criproxy.LockRoot(root)
	require.NoError(t, err, "the lock is free once released")
	require.NoError(t, again.Close())
}
