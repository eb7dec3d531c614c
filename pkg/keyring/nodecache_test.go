package keyring_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/keyring"
)

// nodeUsers looks image up in kr and returns the users of the candidates.
func nodeUsers(t *testing.T, kr keyring.Keyring, image string) []string {
	t.Helper()
	got, err := kr.Lookup(context.Background(), image)
	require.NoError(t, err)
	var out []string
	for _, c := range got {
		out = append(out, c.Auth.Username)
	}
	return out
}

func nodeConfig(user, pass string) []byte {
	return []byte(`{"auths":{"registry.example":{"auth":"` + b64(user+":"+pass) + `"}}}`)
}

// TestCachedNodeKeyringFollowsFiles: every look-up sees the files as they
// are, with no timer: a file created, replaced by a rename, edited in
// place with the same size, removed, and an earlier file of the search
// order that appears. Files that did not change are not read again, and
// files after the one used are not looked at. The clock is far past every
// file's times, so no read is unsure (TestCachedNodeKeyringRacyFiles).
func TestCachedNodeKeyringFollowsFiles(t *testing.T) {
	h := testHasher(t)
	clk := clocktesting.NewFakePassiveClock(time.Now().Add(time.Hour))
	dir := t.TempDir()
	first := filepath.Join(dir, "root", "config.json")
	second := filepath.Join(dir, "home", ".docker", "config.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(first), 0o755))
	var reports []error
	kr := keyring.CachedNodeKeyring(h, []string{first, second}, clk, func(err error) { reports = append(reports, err) })
	// Each change gets a modification time of its own, as a later write
	// has, so that the test does not depend on the file system's
	// timestamp granularity.
	mtime := time.Now().Add(-time.Hour)
	touch := func(path string) {
		mtime = mtime.Add(time.Second)
		require.NoError(t, os.Chtimes(path, mtime, mtime))
	}

	steps := []struct {
		name      string
		change    func()
		want      []string
		wantReads int64
	}{
		{name: "no file yet: empty", want: nil, wantReads: 1},
		{name: "unchanged: not read again", want: nil, wantReads: 1},
		{name: "the later file created: read at once", change: func() {
			writeFile(t, second, nodeConfig("second", "pw-node-Hh6"))
			touch(second)
		}, want: []string{"second"}, wantReads: 2},
		{name: "unchanged again", want: []string{"second"}, wantReads: 2},
		{name: "an earlier file appears: it wins", change: func() {
			writeFile(t, first, nodeConfig("old", "pw-old-Vb3"))
			touch(first)
		}, want: []string{"old"}, wantReads: 3},
		{name: "a file after the one used changes: not looked at", change: func() {
			writeFile(t, second, nodeConfig("second-rotated", "pw-node-Hh6"))
			touch(second)
		}, want: []string{"old"}, wantReads: 3},
		{name: "replaced by a rename, same size and time: the inode tells", change: func() {
			fi, err := os.Stat(first)
			require.NoError(t, err)
			tmp := writeFile(t, filepath.Join(dir, "root", "config.json.tmp"), nodeConfig("new", "pw-old-Vb3"))
			require.Equal(t, fi.Size(), int64(len(nodeConfig("new", "pw-old-Vb3"))), "the test wants the same size")
			require.NoError(t, os.Chtimes(tmp, fi.ModTime(), fi.ModTime()))
			require.NoError(t, os.Rename(tmp, first))
		}, want: []string{"new"}, wantReads: 4},
		{name: "edited in place with the same size", change: func() {
			f, err := os.OpenFile(first, os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt(nodeConfig("eve", "pw-old-Vb3"), 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			touch(first)
		}, want: []string{"eve"}, wantReads: 5},
		{name: "removed: the next file again", change: func() { require.NoError(t, os.Remove(first)) }, want: []string{"second-rotated"}, wantReads: 6},
		{name: "corrupted: passed over, reported", change: func() {
			writeFile(t, second, []byte(`{"auths":`))
			touch(second)
		}, want: nil, wantReads: 7},
		{name: "still corrupted: not read again, not reported again", want: nil, wantReads: 7},
	}
	for _, s := range steps {
		if s.change != nil {
			s.change()
		}
		assert.Equal(t, s.want, nodeUsers(t, kr, "registry.example/app"), s.name)
		assert.Equal(t, s.wantReads, keyring.NodeReads(kr), "reads after: %s", s.name)
	}
	require.Len(t, reports, 1, "one report for the one read that passed over a file")
	assert.ErrorIs(t, reports[0], keyring.ErrInvalidDockerConfig)
	assertNoSecrets(t, reports[0].Error())
}

// TestCachedNodeKeyringRacyFiles: a file whose time is within RacyWindow
// of the clock when it is read could be written again within the same
// timestamp tick with the same size, so it is read at every look-up until
// it is older than that.
func TestCachedNodeKeyringRacyFiles(t *testing.T) {
	h := testHasher(t)
	clk := clocktesting.NewFakePassiveClock(time.Now())
	path := writeFile(t, filepath.Join(t.TempDir(), "config.json"), nodeConfig("aaa", "pw-s3cret-Qz8"))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	kr := keyring.CachedNodeKeyring(h, []string{path}, clk, nil)
	assert.Equal(t, []string{"aaa"}, nodeUsers(t, kr, "registry.example/app"))
	require.Equal(t, int64(1), keyring.NodeReads(kr))

	// Rewritten in place, same size, its modification time put back: only
	// the change time can tell, and within one tick it cannot.
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(nodeConfig("bbb", "pw-s3cret-Qz8"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
	assert.Equal(t, []string{"bbb"}, nodeUsers(t, kr, "registry.example/app"), "an unsure read is read again")
	assert.Equal(t, int64(2), keyring.NodeReads(kr))

	clk.SetTime(clk.Now().Add(keyring.RacyWindow + time.Second))
	assert.Equal(t, []string{"bbb"}, nodeUsers(t, kr, "registry.example/app"))
	assert.Equal(t, int64(3), keyring.NodeReads(kr), "read once more: the last read was unsure")
	assert.Equal(t, []string{"bbb"}, nodeUsers(t, kr, "registry.example/app"))
	assert.Equal(t, int64(3), keyring.NodeReads(kr), "sure now: not read again")
}

// TestCachedNodeKeyringConcurrent: look-ups from many goroutines while the
// file changes (run with -race) each see a whole file.
func TestCachedNodeKeyringConcurrent(t *testing.T) {
	h := testHasher(t)
	path := writeFile(t, filepath.Join(t.TempDir(), "config.json"), nodeConfig("u0", "pw-s3cret-Qz8"))
	kr := keyring.CachedNodeKeyring(h, []string{path}, nil, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				got, err := kr.Lookup(context.Background(), "registry.example/app")
				assert.NoError(t, err)
				assert.Len(t, got, 1)
			}
		}()
	}
	for i := range 20 {
		tmp := writeFile(t, path+".tmp", nodeConfig(fmt.Sprintf("u%d", i+1), "pw-s3cret-Qz8"))
		require.NoError(t, os.Rename(tmp, path))
	}
	wg.Wait()
	assert.Equal(t, []string{"u20"}, nodeUsers(t, kr, "registry.example/app"))
}

// TestCachedNodeKeyringNextFile: a file that is corrupt, too large or not
// a file is passed over for the next one, as the kubelet does.
func TestCachedNodeKeyringNextFile(t *testing.T) {
	good := []byte(`{"auths":{"registry.example":{"username":"node","password":"pw-node-Hh6"}}}`)
	huge := make([]byte, 10<<20+1)
	for i := range huge {
		huge[i] = ' '
	}
	tests := []struct {
		name  string
		first func(t *testing.T, path string)
	}{
		{name: "corrupt", first: func(t *testing.T, p string) {
			writeFile(t, p, []byte(`{"auths":{"registry.example":{"password":"pw-node-Hh6"`))
		}},
		{name: "larger than the bound", first: func(t *testing.T, p string) { writeFile(t, p, huge) }},
		{name: "a directory", first: func(t *testing.T, p string) { writeFile(t, filepath.Join(p, "x"), nil) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			first := filepath.Join(dir, "root", "config.json")
			tc.first(t, first)
			second := writeFile(t, filepath.Join(dir, "home", ".docker", "config.json"), good)
			var reports []error
			kr := keyring.CachedNodeKeyring(testHasher(t), []string{first, second}, nil, func(err error) { reports = append(reports, err) })
			got, err := kr.Lookup(context.Background(), "registry.example/app")
			require.NoError(t, err)
			require.Len(t, got, 1)
			assert.Equal(t, second, got[0].Source.Name)
			require.Len(t, reports, 1)
			var ferr *keyring.ConfigFileError
			require.ErrorAs(t, reports[0], &ferr)
			assert.Equal(t, first, ferr.Path)
			assertNoSecrets(t, reports[0].Error())
		})
	}
}
