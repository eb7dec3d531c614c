package credtracker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/pullguard/pullguard/pkg/credential"
)

// sweepStoreBytes builds the sweep's small store and returns its files.
func sweepStoreBytes(tb testing.TB) (store, key []byte) {
	dir := tb.TempDir()
	buildSweepStore(tb, dir, 2)
	store, err := os.ReadFile(filepath.Join(dir, StoreFile))
	require.NoError(tb, err)
	key, err = os.ReadFile(filepath.Join(dir, HashKeyFile))
	require.NoError(tb, err)
	return store, key
}

func TestParseBoltFileReadsWhatBboltWrote(t *testing.T) {
	dir := t.TempDir()
	buildSweepStore(t, dir, 3000) // several levels of branch pages
	data, err := os.ReadFile(filepath.Join(dir, StoreFile))
	require.NoError(t, err)
	f, err := parseBoltFile(data)
	require.NoError(t, err)
	assert.Len(t, f.buckets[string(bucketPulled)], 3000)
	assert.Len(t, f.buckets[string(bucketIntents)], 1)
	assertSameAsBbolt(t, filepath.Join(dir, StoreFile), f)
}

func TestParseBoltFileRejects(t *testing.T) {
	orig, _ := sweepStoreBytes(t)
	ps := os.Getpagesize()
	tests := []struct {
		name   string
		damage func(b []byte) []byte
		want   string
	}{
		{name: "empty", damage: func([]byte) []byte { return nil }, want: "shorter than two pages"},
		{name: "one page", damage: func(b []byte) []byte { return b[:ps] }, want: "shorter than two pages"},
		{name: "both meta pages", damage: func(b []byte) []byte { b[16] ^= 1; b[ps+16] ^= 1; return b }, want: "no valid meta page"},
		{name: "cut after three pages", damage: func(b []byte) []byte { return b[:3*ps] }, want: "truncated?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseBoltFile(tt.damage(bytes.Clone(orig)))
			require.ErrorIs(t, err, errBoltFormat)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// assertSameAsBbolt checks that bbolt opens the file parseBoltFile
// accepted, finds the same entries, and can write to it.
func assertSameAsBbolt(t *testing.T, path string, f *boltFile) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		n := 0
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			n++
			want, ok := f.buckets[string(name)]
			require.True(t, ok, "bucket %q", name)
			i := 0
			require.NoError(t, b.ForEach(func(k, v []byte) error {
				require.Less(t, i, len(want))
				assert.Equal(t, want[i].key, k)
				assert.Equal(t, want[i].value, v)
				i++
				return nil
			}))
			assert.Equal(t, len(want), i)
			return nil
		})
	}))
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for name := range f.buckets {
			if err := tx.Bucket([]byte(name)).Put([]byte("fuzz-key"), bytes.Repeat([]byte{1}, 3000)); err != nil {
				return err
			}
		}
		return nil
	}))
}

// FuzzStoreFile feeds anything as records.db. The reader never panics or
// allocates past its input; whatever it accepts, bbolt opens without a
// fault, reads the same entries from and writes to; the seal check and the
// decoding never panic on it.
func FuzzStoreFile(f *testing.F) {
	orig, key := sweepStoreBytes(f)
	ps := os.Getpagesize()
	f.Add(orig)
	for c := 0; c < len(orig); c += ps {
		f.Add(orig[:c])
	}
	f.Add(bytes.Repeat([]byte("garbage!"), 2048))
	h, err := credential.NewHasher(key)
	require.NoError(f, err)
	sl := newSealer(h)
	f.Fuzz(func(t *testing.T, data []byte) {
		bf, err := parseBoltFile(data)
		if err != nil {
			require.ErrorIs(t, err, errBoltFormat)
			return
		}
		if _, err := sl.verify(bf, 2); err == nil {
			_, _ = decodeContents(bf, 2, nil)
			if c, err := decodeContents(bf, 2, newRecordIndex()); err == nil {
				require.NoError(t, newRecordIndex().install(c.prepared))
			}
		}
		path := filepath.Join(t.TempDir(), StoreFile)
		require.NoError(t, os.WriteFile(path, data, 0o600))
		assertSameAsBbolt(t, path, bf)
	})
}
