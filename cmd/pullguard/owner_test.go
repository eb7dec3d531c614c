package main_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/dirlock"
	"github.com/pullguard/pullguard/pkg/podworkers"
	"github.com/pullguard/pullguard/pkg/registry"
)

// TestSecondProcessOnARootDirFailsAtOnce: while a process holds the root
// directory, `pullguard run` on it fails with a message naming the
// holder's pid and leaves every byte of the state as it was (the embedded
// runtime's in-flight downloads included).
func TestSecondProcessOnARootDirFailsAtOnce(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root)
	require.Equal(t, 0, res.code, res.stderr)
	ingest := filepath.Join(root, podworkers.RuntimeDir, "content", "ingest", "download-in-flight")
	require.NoError(t, os.WriteFile(ingest, []byte("partial"), 0o600))

	holder, err := dirlock.Acquire(root, podworkers.LockFile) // this test process is the running pullguard
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Release() })
	before := dirDigest(t, root)
	w.reg.Reset()

	res = pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root)

	assert.NotEqual(t, 0, res.code)
	assert.Contains(t, res.stderr, "root directory is in use")
	assert.Contains(t, res.stderr, "process "+strconv.Itoa(os.Getpid()), "the message names the holder")
	assert.Equal(t, before, dirDigest(t, root), "the second process changed nothing")
	assert.FileExists(t, ingest)
	assert.Zero(t, len(w.reg.Requests()), "the second process contacted no registry")

	require.NoError(t, holder.Release())
	res = pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root)
	assert.Equal(t, 0, res.code, "once released, the root directory is usable: %s", res.stderr)
}

// TestUnreadableRuntimeIndexKeepsServing: a damaged embedded-runtime index
// is set aside and rebuilt from the content store; the command keeps
// serving and the images come back with a manifest request each, no blob.
func TestUnreadableRuntimeIndexKeepsServing(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	first := decodeRun(t, res.stdout)
	index := filepath.Join(root, podworkers.RuntimeDir, "images.json")
	require.NoError(t, os.WriteFile(index, []byte("{\"apiVersion\":\x00garbage"), 0o600))
	w.reg.Reset()

	res = pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root, "-o", "json")

	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "set aside and rebuilt")
	second := decodeRun(t, res.stdout)
	require.Len(t, second.Results, len(first.Results))
	for i := range first.Results {
		assert.Equal(t, first.Results[i].Error, second.Results[i].Error, "pod %s", first.Results[i].Pod)
	}
	assert.Zero(t, w.reg.Count(registry.Filter{Kind: registry.KindBlob}), "the content was kept")
	aside, err := filepath.Glob(index + ".unreadable-*")
	require.NoError(t, err)
	assert.Len(t, aside, 1)
}
