package credtracker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"k8s.io/klog/v2"

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

// checkedBboltVersion is the bbolt release whose on-disk format
// boltfile.go was checked against (format version 2: bbolt's
// internal/common/types.go, page.go, meta.go, inode.go, bucket.go).
const checkedBboltVersion = "v1.5.0"

// TestBboltIsTheVersionTheCheckerKnows makes a bbolt upgrade a conscious
// change: the structural check reads bbolt's format by hand, and a format
// it does not know would read as damage on every node, which would then
// set its store aside and verify every image once more.
func TestBboltIsTheVersionTheCheckerKnows(t *testing.T) {
	// (A test binary's build information lists no dependencies: the
	// module's go.mod says which bbolt it builds with.)
	gomod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	require.NoError(t, err)
	got := ""
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "go.etcd.io/bbolt" {
			got = f[1]
		}
	}
	assert.Equal(t, checkedBboltVersion, got,
		"bbolt changed: compare its on-disk format (internal/common) with boltfile.go's, run TestParseBoltFileReadsWhatBboltWrote and FuzzStoreFile, then update checkedBboltVersion")
}

// TestParseBoltFileReadsWhatBboltWrote: for stores of every shape the
// structural check must read, written by the bbolt this module builds
// with, the check accepts the file, finds the entries bbolt finds, and
// counts as in use exactly the pages bbolt says are not free. It fails
// when bbolt's format moves away from what boltfile.go reads.
func TestParseBoltFileReadsWhatBboltWrote(t *testing.T) {
	tests := []struct {
		name    string
		records int
		shape   func(t *testing.T, tr *tracker)
	}{
		{name: "inline buckets", records: 2},
		{name: "branch pages", records: 3000},
		{name: "overflow pages", records: 2, shape: func(t *testing.T, tr *tracker) {
			big := (*ImageRecord)(nil).withPull(benchRef(900), "registry.example/big", credential.Source{Kind: credential.SourceSecret, Namespace: strings.Repeat("n", 9000), Name: "s"}, credential.Hash{1}, time.Now(), DefaultMaxEntries, 0)
			require.NoError(t, tr.store.apply([]*ImageRecord{big}, nil, nil))
		}},
		{name: "freed pages", records: 3000, shape: func(t *testing.T, tr *tracker) {
			var del []string
			for i := 1; i < 3000; i += 2 {
				del = append(del, fmt.Sprintf("sha256:%064x", i))
			}
			require.NoError(t, tr.store.apply(nil, del, nil))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			buildSweepStore(t, dir, tt.records)
			if tt.shape != nil {
				tr, err := New(context.Background(), Config{Dir: dir}, sweepInventory(), WithLogger(klog.Background().V(10)))
				require.NoError(t, err)
				tt.shape(t, tr.(*tracker))
				require.NoError(t, tr.Close())
			}
			path := filepath.Join(dir, StoreFile)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			f, err := parseBoltFile(data)
			require.NoError(t, err)
			assertSamePagesAsBbolt(t, path, f)
			assertSameAsBbolt(t, path, f) // (writes to the file)
		})
	}
}

// assertSamePagesAsBbolt checks that the pages parseBoltFile counted as
// in use are those bbolt's own page inspection (Tx.Page) does not call
// free.
func assertSamePagesAsBbolt(t *testing.T, path string, f *boltFile) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		for id := 2; id < int(f.pages); {
			info, err := tx.Page(id)
			require.NoError(t, err)
			require.NotNil(t, info, "page %d", id)
			if info.Type == "free" { // (its header, and overflow, are stale)
				assert.False(t, f.used[id], "page %d is free", id)
				id++
				continue
			}
			for p := id; p <= id+info.OverflowCount; p++ {
				assert.True(t, f.used[p], "page %d (%s, part of page %d)", p, info.Type, id)
			}
			id += 1 + info.OverflowCount
		}
		return nil
	}))
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
// fault, reads the same entries from and writes to; the schema version's
// reading (damage or a newer store, nothing else), the seal check and the
// decoding never panic on it.
func FuzzStoreFile(f *testing.F) {
	orig, key := sweepStoreBytes(f)
	ps := os.Getpagesize()
	f.Add(orig)
	for c := 0; c < len(orig); c += ps {
		f.Add(orig[:c])
	}
	f.Add(bytes.Repeat([]byte("garbage!"), 2048))
	// A store of schema version 1 (another key: its seal fails).
	schema1, err := os.ReadFile(filepath.Join("testdata", "schema1", StoreFile))
	require.NoError(f, err)
	f.Add(schema1)
	h, err := credential.NewHasher(key)
	require.NoError(f, err)
	sl := newSealer(h)
	f.Fuzz(func(t *testing.T, data []byte) {
		bf, err := parseBoltFile(data)
		assertSameFromFile(t, data, bf, err)
		if err != nil {
			require.ErrorIs(t, err, errBoltFormat)
			return
		}
		if _, err := readSchema(bf, StoreFile); err != nil {
			var ve *StoreVersionError
			require.True(t, errors.Is(err, errStoreCorrupt) || errors.As(err, &ve), "%v", err)
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

// assertSameFromFile checks that reading data as a file, a page at a time
// through a batch buffer of a few pages (as a start-up does), finds what
// parseBoltFile found in the whole copy: the same error or the same
// entries.
func assertSameFromFile(t *testing.T, data []byte, want *boltFile, wantErr error) {
	t.Helper()
	got := map[string][]boltEntry{}
	var pending []boltEntry // in the batch buffer until the next flush
	var pendingBucket []string
	flush := func() error {
		for i, e := range pending {
			got[pendingBucket[i]] = append(got[pendingBucket[i]], boltEntry{bytes.Clone(e.key), bytes.Clone(e.value)})
		}
		pending, pendingBucket = pending[:0], pendingBucket[:0]
		return nil
	}
	src := newFilePages(bytes.NewReader(data), uint64(len(data)), 3*os.Getpagesize(), flush)
	f, err := scanBoltFile(src, func(bucket string, k, v []byte) error {
		pending, pendingBucket = append(pending, boltEntry{k, v}), append(pendingBucket, bucket)
		return nil
	})
	if wantErr != nil {
		require.Error(t, err, "parseBoltFile: %v", wantErr)
		return
	}
	require.NoError(t, err)
	require.NoError(t, flush())
	assert.Equal(t, want.names, f.names)
	assert.Equal(t, want.txid, f.txid)
	assert.Equal(t, want.used, f.used)
	for name, entries := range want.buckets {
		if len(entries) == 0 {
			assert.Empty(t, got[name], name)
			continue
		}
		assert.Equal(t, entries, got[name], name)
	}
}
