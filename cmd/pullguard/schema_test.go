package main_test

import (
	binaryenc "encoding/binary"
	"encoding/json"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// setStoreSchema gives the store the schema version v, as a later
// pullguard records it: meta/schema, a credtracker value of version 1 and
// kind 4 holding v, with its CRC-32C over the key. The encoding is spelled
// out here apart from credtracker/schema.go on purpose: it is what every
// pullguard must keep, so that an earlier one tells a later store from a
// damaged one.
func setStoreSchema(t *testing.T, store string, v uint64) {
	t.Helper()
	body := binaryenc.AppendUvarint([]byte("pgct\x01\x04"), v)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	value := binaryenc.LittleEndian.AppendUint32(body, crc32.Update(crc32.Checksum([]byte("schema"), castagnoli), castagnoli, body))
	db, err := bolt.Open(store, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("schema"), value) }))
	require.NoError(t, db.Close())
}

// storeDirFiles is every file under dir and its bytes.
func storeDirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	fsys := os.DirFS(dir)
	require.NoError(t, fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files[path], err = fs.ReadFile(fsys, path)
		}
		return err
	}))
	return files
}

// TestStoreFromANewerPullguard: after a downgrade, the store a newer
// pullguard wrote is refused by run, serve and records, which exit 1 with
// both versions and what to do, pull nothing, and change nothing under
// the store's directory. Doing what the message says to start over works:
// the store moved aside is kept, and every present image needs one
// verification.
func TestStoreFromANewerPullguard(t *testing.T) {
	w := newWorld(t)
	short := shortDir(t)
	root := filepath.Join(short, "root")
	dir := filepath.Join(root, "credtracker")
	store := filepath.Join(dir, "records.db")
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	setStoreSchema(t, store, 3)
	before := storeDirFiles(t, dir)
	w.reg.Reset()

	socket := filepath.Join(short, "pg.sock")
	for _, tt := range []struct {
		name string
		args []string
	}{
		{name: "run", args: []string{"run", "-f", w.manifest("restart.yaml"), "--root-dir", root, "-o", "json"}},
		{name: "serve", args: []string{"serve", "--listen", "unix://" + socket, "--root-dir", root, "--image-service-endpoint", "embedded",
			"--metrics-bind-address", "0", "--kubelet-root-dir", filepath.Join(short, "no-kubelet")}},
		{name: "records", args: []string{"records", "--root-dir", root}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := pullguard(t, tt.args...)
			assert.Equal(t, 1, res.code, res.stdout)
			assert.Contains(t, res.stderr, "record store "+store+" has schema version 3, written by a newer pullguard; this pullguard reads schema versions 1 to 2")
			assert.Contains(t, res.stderr, "Nothing was changed and no record is lost: install the newer pullguard again")
			assert.Contains(t, res.stderr, "(mv "+store+" "+store+".schema-3)")
			assert.Contains(t, res.stderr, "every image present on the node needs one verification with its registry")
			assert.NotContains(t, res.stderr, "integrity check")
			assert.Empty(t, res.stdout, "no pod ran, no record was listed")
			assert.Equal(t, before, storeDirFiles(t, dir), "nothing under the store's directory changed")
			assert.Empty(t, w.reg.Requests(), "nothing was pulled")
			assert.NoFileExists(t, socket, "serve does not serve")
		})
	}

	// Starting over, as the message says.
	require.NoError(t, os.Rename(store, store+".schema-3"))
	res = pullguard(t, "run", "-f", w.manifest("restart.yaml"), "--root-dir", root, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc := decodeRun(t, res.stdout)
	require.Len(t, doc.Results, 2)
	assert.True(t, doc.Results[0].Pulled, "tenant A verifies its image once")
	assert.Equal(t, "ErrImageNeverPull", doc.Results[1].Error, "tenant B's Never pod is refused")
	kept, err := os.ReadFile(store + ".schema-3")
	require.NoError(t, err)
	assert.Equal(t, before["records.db"], kept, "the newer store is kept as it was")
}

// TestStoreFromAnOlderPullguard: after an upgrade, records says the store
// will be migrated (and changes nothing); the next run migrates it and
// records reads every record.
func TestStoreFromAnOlderPullguard(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	dir := filepath.Join(root, "credtracker")
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join("..", "..", "credtracker", "testdata", "schema1"))))
	for _, f := range []string{"expected.json", "generate.sh"} {
		require.NoError(t, os.Remove(filepath.Join(dir, f)))
	}
	before := storeDirFiles(t, dir)

	res := pullguard(t, "records", "--root-dir", root)
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "has schema version 1, older than this pullguard's 2: pullguard serve or run migrates it at its next start, keeping every record")
	assert.Equal(t, before, storeDirFiles(t, dir))

	res = pullguard(t, "run", "-f", w.manifest("restart.yaml"), "--root-dir", root, "-o", "json", "-v=1")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "Migrated the record store to this pullguard's schema version; every record was kept")
	res = pullguard(t, "records", "--root-dir", root, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	var recs struct {
		Records []struct {
			ImageRef string `json:"imageRef"`
		} `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &recs), res.stdout)
	refs := map[string]bool{}
	for _, r := range recs.Records {
		refs[r.ImageRef] = true
	}
	for _, ref := range []string{"a1", "b2", "c3", "d4"} {
		assert.True(t, refs["sha256:"+strings.Repeat(ref, 32)], "the fixture's record %s… is kept", ref)
	}
	assert.True(t, refs[w.pushed.ConfigDigest], "and the run's own")
}
