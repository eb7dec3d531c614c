package main_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var recordFormats = []string{"table", "wide", "json", "yaml"}

// TestRecordsThroughServe: while serve runs, records reads its records
// on the admin socket (0600, in a 0750 directory) and prints, in every -o
// format, exactly what it prints from the stopped store; with serve gone
// (its socket absent) it reads the store itself.
func TestRecordsThroughServe(t *testing.T) {
	w := newWorld(t)
	dir := shortDir(t)
	admin := filepath.Join(dir, "admin", "admin.sock")
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded", "--admin-socket", admin)

	fi, err := os.Stat(admin)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "admin socket mode")
	fi, err = os.Stat(filepath.Dir(admin))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o750), fi.Mode().Perm(), "admin socket's directory mode")

	res := runTenantsThroughServe(t, w, d, filepath.Join(dir, "kubelet"))
	require.Equal(t, 0, res.code, res.stderr)

	live := map[string]string{}
	for _, f := range recordFormats {
		res := pullguard(t, "records", "--root-dir", d.root, "--admin-socket", admin, "-o", f)
		require.Equal(t, 0, res.code, "-o %s: %s", f, res.stderr)
		live[f] = res.stdout
	}
	assert.Contains(t, live["json"], "cri-auth-", "serve's records hold the CRI credential's entry")
	assert.Contains(t, live["table"], "team-a/app")

	// Without the admin socket, records never opens a store serve holds.
	res = pullguard(t, "records", "--root-dir", d.root, "--admin-socket", "")
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "a pullguard serve holds "+d.root+" (serve.lock) but --admin-socket is empty")

	require.Equal(t, 0, d.stop(t))
	assert.NoFileExists(t, admin, "the admin socket is removed on SIGTERM")
	for _, f := range recordFormats {
		res := pullguard(t, "records", "--root-dir", d.root, "--admin-socket", admin, "-o", f)
		require.Equal(t, 0, res.code, "-o %s: %s", f, res.stderr)
		assert.Equal(t, res.stdout, live[f], "-o %s: the stopped store reads as serve answered", f)
	}
}

// runTenantsThroughServe runs the tenants' pods with `pullguard run` as a
// kubelet without its own gate, its image service serve's socket.
func runTenantsThroughServe(t *testing.T, w *world, d *daemon, kubeletRoot string) cliResult {
	t.Helper()
	return pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", kubeletRoot,
		"--image-service-endpoint", "unix://"+d.socket, "--feature-gates", "KubeletEnsureSecretPulledImages=false", "-o", "json")
}

// TestRecordsServeNotAnswering: a serve that holds the root directory
// (its lock) but does not answer on the admin socket (starting, or given
// another --admin-socket), or while another root directory's serve
// answers there, is named, not failed on as a locked store; with the
// lock free, the store is read directly.
func TestRecordsServeNotAnswering(t *testing.T) {
	w := newWorld(t)
	dir := shortDir(t)
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded")
	res := runTenantsThroughServe(t, w, d, filepath.Join(dir, "kubelet"))
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, 0, d.stop(t))

	// The test holds serve's lock, as a serve still loading its store
	// does; nothing answers on the admin socket.
	lock, err := os.Open(filepath.Join(d.root, "serve.lock"))
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	admin := filepath.Join(dir, "none.sock")
	res = pullguard(t, "records", "--root-dir", d.root, "--admin-socket", admin)
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "a pullguard serve holds "+d.root+" (serve.lock) but does not answer on the admin socket "+admin+" (still starting?")

	// A serve of another root directory answers on the admin socket
	// given: it is not the one that holds d.root.
	other := startServe(t, filepath.Join(dir, "other.sock"), filepath.Join(dir, "other"), "--image-service-endpoint", "embedded", "--admin-socket", admin)
	res = pullguard(t, "records", "--root-dir", d.root, "--admin-socket", admin)
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "a pullguard serve holds "+d.root+" (serve.lock) but the serve on the admin socket "+admin+" serves "+other.root)

	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_UN))
	res = pullguard(t, "records", "--root-dir", d.root, "--admin-socket", admin, "-o", "json")
	require.Equal(t, 0, res.code, "no serve on d.root: its store is read directly: %s", res.stderr)
	assert.Contains(t, res.stdout, "cri-auth-")
	require.Equal(t, 0, other.stop(t))
}
