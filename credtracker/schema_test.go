package credtracker

import (
	"context"
	"encoding/hex"
	"encoding/json"
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
	clocktesting "k8s.io/utils/clock/testing"
)

const schema1Dir = "testdata/schema1"

// schema1Recovery is in the status of the fixture's store, which was once
// rebuilt: a start that finds it, and no other reason, recovered nothing.
const schema1Recovery = "7 bytes is shorter than two pages"

// copySchema1 puts the files of the schema version 1 fixture (a store
// written by a tracker of that version, testdata/schema1/generate.sh) in
// a new directory, as a node's credtracker directory.
func copySchema1(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{StoreFile, GenerationFile, HashKeyFile} {
		data, err := os.ReadFile(filepath.Join(schema1Dir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o600))
	}
	return dir
}

// dirFiles is every file of dir and its bytes.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = data
	}
	return files
}

// CopySchema1 and DirFiles are copySchema1 and dirFiles, for this
// package's black-box tests.
var CopySchema1, DirFiles = copySchema1, dirFiles

// schema1Start starts a tracker over dir as the fixture's expected.json
// says (its runtime's images, its clock), with the default policy.
func schema1Start(t *testing.T, dir string) (*tracker, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(schema1Dir, "expected.json"))
	require.NoError(t, err)
	var exp struct {
		Clock     time.Time
		Inventory []Image
	}
	require.NoError(t, json.Unmarshal(data, &exp))
	inv := ImageInventoryFunc(func(context.Context) ([]Image, error) { return exp.Inventory, nil })
	tr, err := New(context.Background(), Config{Dir: dir}, inv, WithClock(clocktesting.NewFakeClock(exp.Clock)), WithLogger(klog.Background().V(10)))
	if err != nil {
		return nil, err
	}
	return tr.(*tracker), nil
}

// migratedSchema1 is a directory holding the fixture migrated by a start.
func migratedSchema1(t *testing.T) string {
	t.Helper()
	dir := copySchema1(t)
	tr, err := schema1Start(t, dir)
	require.NoError(t, err)
	require.NoError(t, tr.Close())
	return dir
}

// schema1Migrated starts a tracker over dir, which holds the fixture
// (migrated or not), and returns its records; the store must be whole (no
// recovery but the fixture's own) and, after the start, of this
// pullguard's schema version.
func schema1Migrated(t *testing.T, dir string) []ImageRecord {
	t.Helper()
	tr, err := schema1Start(t, dir)
	require.NoError(t, err)
	defer tr.Close()
	assert.Contains(t, tr.Status().RecoveryReason, schema1Recovery, "the fixture's own recovery, and no other")
	assert.Equal(t, migrations.current(), storeSchema(t, dir))
	return tr.Records()
}

// storeFile is the structure of the store under dir.
func storeFile(t *testing.T, dir string) *boltFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, StoreFile))
	require.NoError(t, err)
	f, err := parseBoltFile(data)
	require.NoError(t, err)
	return f
}

// storeSchema is the schema version the store under dir names, whatever
// this pullguard's is.
func storeSchema(t *testing.T, dir string) uint64 {
	t.Helper()
	for _, e := range storeFile(t, dir).buckets[string(bucketMeta)] {
		if string(e.key) == string(keySchema) {
			d, err := newDecoder(string(keySchema), e.value, kindStoreSchema)
			require.NoError(t, err)
			v := d.uvarint("schema")
			require.NoError(t, d.end())
			return v
		}
	}
	return schemaLegacy
}

// setMigrationHook sets migrationHook until t ends.
func setMigrationHook(t *testing.T, hook func(step string) error) {
	migrationHook = hook
	t.Cleanup(func() { migrationHook = nil })
}

// useMigrations makes r the store's history until t ends, as a later
// pullguard's would be.
func useMigrations(t *testing.T, r schemaRegistry) {
	old := migrations
	migrations = r
	t.Cleanup(func() { migrations = old })
}

var errInjected = errors.New("injected fault")

// migrationSteps are the steps of the fixture's migration, in order.
func migrationSteps(t *testing.T) []string {
	var steps []string
	setMigrationHook(t, func(step string) error { steps = append(steps, step); return nil })
	tr, err := schema1Start(t, copySchema1(t))
	require.NoError(t, err)
	require.NoError(t, tr.Close())
	migrationHook = nil
	require.Equal(t, []string{"opened", "migrating to 2", "recording schema 2", "committing", "committed"}, steps)
	return steps
}

// TestSchemaEnvelope pins what every later schema keeps, so that this
// pullguard can tell a later store from a damaged one: the encoding of
// meta/schema. A change here makes every node that runs an earlier
// pullguard read a later store as damaged.
func TestSchemaEnvelope(t *testing.T) {
	// "pgct" | value version 1 | kind 4 | uvarint version | CRC-32C of
	// "schema" and what comes before it (little endian), computed apart.
	for _, tt := range []struct {
		version uint64
		want    string
	}{
		{version: 2, want: "7067637401" + "04" + "02" + "892db6ef"},
		{version: 3, want: "7067637401" + "04" + "03" + "8aaedd1d"},
		{version: 300, want: "7067637401" + "04" + "ac02" + "4efe7e39"},
	} {
		t.Run(fmt.Sprint(tt.version), func(t *testing.T) {
			assert.Equal(t, tt.want, hex.EncodeToString(encodeSchema(tt.version)))
		})
	}
	assert.Equal(t, "meta", string(bucketMeta))
	assert.Equal(t, "schema", string(keySchema))
}

// TestStoreFromANewerPullguardIsRefused: a store written by a pullguard
// with one more migration than this one, in every shape a later schema
// may take, is refused with both versions and what to do, not read as
// damaged; nothing under the directory changes, and `pullguard records`
// says the same.
func TestStoreFromANewerPullguardIsRefused(t *testing.T) {
	// What tomorrow's store may hold besides its version: tomorrow's
	// pullguard (this one with one more migration) writes it, then the
	// edit gives it the shape (bbolt's, as a later pullguard would).
	tests := []struct {
		name     string
		edit     func(tx *bolt.Tx) error
		wantFrom string
	}{
		{name: "one more migration", wantFrom: "schema version 3"},
		{
			name: "a bucket this pullguard does not know",
			edit: func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket([]byte("tomorrow"))
				if err != nil {
					return err
				}
				return b.Put([]byte("k"), []byte("v"))
			},
			wantFrom: "schema version 3",
		},
		{
			name: "values of another version",
			edit: func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketPulled)
				var refs, values [][]byte
				if err := b.ForEach(func(k, v []byte) error {
					refs, values = append(refs, k), append(values, v)
					return nil
				}); err != nil {
					return err
				}
				for i, k := range refs {
					body := append([]byte(nil), values[i][:len(values[i])-trailerLen]...)
					body[len(magic)] = 2
					e := &encoder{buf: body}
					if err := b.Put(k, e.finish(string(k))); err != nil {
						return err
					}
				}
				return nil
			},
			wantFrom: "schema version 3",
		},
		{
			name:     "another seal",
			edit:     func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySeal, []byte("tomorrow's seal")) },
			wantFrom: "schema version 3",
		},
		{
			name:     "a far later version",
			edit:     func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, encodeSchema(1<<40)) },
			wantFrom: fmt.Sprintf("schema version %d", uint64(1<<40)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copySchema1(t)
			today := migrations
			migrations = append(append(schemaRegistry(nil), today...), migration{to: 3, what: "tomorrow", migrate: func(*sealedTx) error { return nil }})
			tr, err := schema1Start(t, dir)
			migrations = today
			require.NoError(t, err)
			require.Contains(t, tr.Status().RecoveryReason, schema1Recovery, "tomorrow's pullguard read the store whole")
			require.NoError(t, tr.Close())
			require.Equal(t, migrations.current()+1, storeSchema(t, dir))
			if tt.edit != nil {
				db, err := bolt.Open(filepath.Join(dir, StoreFile), 0o600, nil)
				require.NoError(t, err)
				require.NoError(t, db.Update(tt.edit))
				require.NoError(t, db.Close())
			}
			before := dirFiles(t, dir)

			_, err = schema1Start(t, dir)
			require.ErrorIs(t, err, ErrStoreTooNew)
			assert.NotErrorIs(t, err, errStoreCorrupt)
			var ve *StoreVersionError
			require.ErrorAs(t, err, &ve)
			assert.Equal(t, uint64(2), ve.Current)
			assert.ErrorContains(t, err, tt.wantFrom+", written by a newer pullguard; this pullguard reads schema versions 1 to 2")
			assert.ErrorContains(t, err, "install the newer pullguard again")
			assert.ErrorContains(t, err, "every image present on the node needs one verification with its registry")
			assert.Equal(t, before, dirFiles(t, dir), "nothing under the directory changed, nothing was set aside")

			_, _, err = ReadRecords(dir)
			assert.ErrorIs(t, err, ErrStoreTooNew)
			assert.ErrorContains(t, err, tt.wantFrom)
			assert.Equal(t, before, dirFiles(t, dir))
		})
	}
}

// TestSchemaEntryDamageIsDamage: a schema version entry that does not
// decode, or names a version never recorded, is damage (the store is set
// aside and rebuilt, as for any other), never a newer store.
func TestSchemaEntryDamageIsDamage(t *testing.T) {
	good := encodeSchema(2)
	tests := []struct {
		name  string
		value []byte
		want  string
	}{
		{name: "version 0", value: encodeSchema(0), want: "names schema version 0, which is never recorded"},
		{name: "version 1", value: encodeSchema(1), want: "names schema version 1, which is never recorded"},
		{name: "empty", value: []byte{}, want: "the schema version entry is damaged"},
		{name: "trailing bytes", value: func() []byte {
			e := newEncoder(kindStoreSchema, 2)
			e.uvarint(2)
			e.uvarint(2)
			return e.finish(string(keySchema))
		}(), want: "the schema version entry is damaged"},
		{name: "a status where the schema belongs", value: encodeStatus(storeStatus{}), want: "the schema version entry is damaged"},
	}
	for i := range 8 * len(good) {
		v := append([]byte(nil), good...)
		v[i/8] ^= 1 << (i % 8)
		tests = append(tests, struct {
			name  string
			value []byte
			want  string
		}{name: fmt.Sprintf("bit %d", i), value: v, want: "the schema version entry is damaged"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &boltFile{buckets: map[string][]boltEntry{string(bucketMeta): {{key: keySchema, value: tt.value}}}}
			_, err := readSchema(f, StoreFile)
			require.ErrorIs(t, err, errStoreCorrupt)
			assert.NotErrorIs(t, err, ErrStoreTooNew)
			var ce *storeCorruptError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, checkSeal, ce.check)
			assert.ErrorContains(t, err, tt.want)
		})
	}

	t.Run("through a start", func(t *testing.T) {
		dir := t.TempDir()
		buildSweepStore(t, dir, 2)
		db, err := bolt.Open(filepath.Join(dir, StoreFile), 0o600, nil)
		require.NoError(t, err)
		require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, encodeSchema(1)) }))
		require.NoError(t, db.Close())
		tr, err := New(context.Background(), Config{Dir: dir}, sweepInventory(), WithLogger(klog.Background().V(10)))
		require.NoError(t, err)
		defer tr.Close()
		assert.Contains(t, tr.Status().RecoveryReason, "names schema version 1")
		assert.Equal(t, ReasonUnknownOrigin, tr.Decide(Request{Image: sweepImage, ImageRef: sweepRef, Names: []string{sweepImage}, PullPolicy: "IfNotPresent"}).Reason)
	})
	t.Run("removed from a store that recorded it", func(t *testing.T) {
		dir := t.TempDir()
		buildSweepStore(t, dir, 2)
		db, err := bolt.Open(filepath.Join(dir, StoreFile), 0o600, nil)
		require.NoError(t, err)
		require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keySchema) }))
		require.NoError(t, db.Close())
		tr, err := New(context.Background(), Config{Dir: dir}, sweepInventory(), WithLogger(klog.Background().V(10)))
		require.NoError(t, err)
		defer tr.Close()
		assert.Contains(t, tr.Status().RecoveryReason, "integrity seal does not match", "read as schema 1, then the seal fails")
	})
}

// TestMigrationFailsCleanlyAtEveryStep fails the migration of the schema
// version 1 fixture at each of its steps: before the commit, the store
// and the generation file are as they were, byte for byte, and the next
// start migrates it; after it, the store is migrated and stays so.
func TestMigrationFailsCleanlyAtEveryStep(t *testing.T) {
	want := schema1Migrated(t, migratedSchema1(t))
	for _, step := range migrationSteps(t) {
		t.Run(step, func(t *testing.T) {
			dir := copySchema1(t)
			before := dirFiles(t, dir)
			setMigrationHook(t, func(s string) error {
				if s == step {
					return errInjected
				}
				return nil
			})
			_, err := schema1Start(t, dir)
			require.ErrorIs(t, err, errInjected)
			assert.NotErrorIs(t, err, errStoreCorrupt)
			migrationHook = nil
			if step == "committed" {
				assert.Equal(t, uint64(2), storeSchema(t, dir), "the commit happened")
			} else {
				assert.Equal(t, before, dirFiles(t, dir), "the store is as it was")
				assert.ErrorContains(t, err, "failed to migrate record store")
			}
			assert.Equal(t, want, schema1Migrated(t, dir))
		})
	}
}

const (
	migrationCrashDirEnv  = "CREDTRACKER_MIGRATION_CRASH_DIR"
	migrationCrashStepEnv = "CREDTRACKER_MIGRATION_CRASH_STEP"
)

// TestMigrationCrashChild is the child process of
// TestMigrationKilledAtEveryStep: it migrates the store, stops at the step
// it is given (it says so, then waits to be killed), and would say "done"
// if it got past it.
func TestMigrationCrashChild(t *testing.T) {
	dir := os.Getenv(migrationCrashDirEnv)
	if dir == "" {
		t.Skip("the child process of TestMigrationKilledAtEveryStep")
	}
	setMigrationHook(t, stopAt(os.Getenv(migrationCrashStepEnv)))
	_, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
	fmt.Printf("done: %v\n", err)
}

// TestMigrationKilledAtEveryStep kills a process migrating the schema
// version 1 fixture at each step of the migration (SIGKILL, in a child
// process): before the commit, the store and the generation file are as
// they were, byte for byte; after it, the store is migrated, also when
// the generation file's write is lost (a crash between the commit and
// that write). Each time, the next start has every record.
func TestMigrationKilledAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills child processes")
	}
	want := schema1Migrated(t, migratedSchema1(t))
	steps := migrationSteps(t)
	for _, step := range append(steps, "committed, generation lost") {
		t.Run(step, func(t *testing.T) {
			dir := copySchema1(t)
			before := dirFiles(t, dir)
			killAt := strings.TrimSuffix(step, ", generation lost")
			killChildAt(t, "TestMigrationCrashChild", killAt, migrationCrashDirEnv+"="+dir, migrationCrashStepEnv+"="+killAt)

			if killAt == "committed" {
				assert.Equal(t, uint64(2), storeSchema(t, dir), "the commit happened")
				if step != killAt {
					require.NoError(t, os.WriteFile(filepath.Join(dir, GenerationFile), before[GenerationFile], 0o600))
				}
			} else {
				assert.Equal(t, before, dirFiles(t, dir), "the store is as it was")
			}
			assert.Equal(t, want, schema1Migrated(t, dir))
		})
	}
}

// TestMigrationRegistry: the next format change is one more function in
// the registry. A test one (schema 3: every record rewritten, and an entry
// added) runs after the real one in the same transaction, only from the
// version it applies to, keeps the seal valid, and leaves the store as it
// was when it fails halfway through its writes.
func TestMigrationRegistry(t *testing.T) {
	for i, m := range migrations {
		require.Equal(t, uint64(i+2), m.to, "the migration at index %d (%s) makes version %d", i, m.what, i+2)
	}
	marker := time.Unix(3, 0).UTC()
	var ran []uint64
	failAfter := -1 // records rewritten before the test migration fails
	counted := func(m migration) migration {
		inner := m.migrate
		m.migrate = func(w *sealedTx) error { ran = append(ran, m.to); return inner(w) }
		return m
	}
	toThree := migration{to: 3, what: "test: every record updated at the marker time", migrate: func(w *sealedTx) error {
		var refs, values [][]byte
		if err := w.tx.Bucket(bucketPulled).ForEach(func(k, v []byte) error {
			refs, values = append(refs, k), append(values, v)
			return nil
		}); err != nil {
			return err
		}
		for i, k := range refs {
			if i == failAfter {
				return errInjected
			}
			r, err := decodeRecord(string(k), values[i])
			if err != nil {
				return err
			}
			r.Updated = marker
			if err := w.put(bucketPulled, k, encodeRecord(r)); err != nil {
				return err
			}
		}
		return w.put(bucketMeta, []byte("test/three"), []byte("yes"))
	}}
	three := schemaRegistry{counted(migrations[0]), counted(toThree)}
	wantRecords := schema1Migrated(t, migratedSchema1(t))
	for i := range wantRecords {
		wantRecords[i].Updated = marker
	}

	tests := []struct {
		name      string
		from      uint64
		failAfter int
		wantRan   []uint64
	}{
		{name: "from schema 1", from: 1, failAfter: -1, wantRan: []uint64{2, 3}},
		{name: "from schema 2", from: 2, failAfter: -1, wantRan: []uint64{3}},
		{name: "from schema 1, failing halfway", from: 1, failAfter: 2, wantRan: []uint64{2, 3}},
		{name: "from schema 2, failing halfway", from: 2, failAfter: 2, wantRan: []uint64{3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copySchema1(t)
			if tt.from == 2 {
				dir = migratedSchema1(t)
			}
			useMigrations(t, three)
			before := dirFiles(t, dir)
			stored := map[string]bool{}
			for _, e := range storeFile(t, dir).buckets[string(bucketPulled)] {
				stored[string(e.key)] = true
			}
			require.NotEmpty(t, stored)
			ran, failAfter = nil, tt.failAfter
			tr, err := schema1Start(t, dir)
			assert.Equal(t, tt.wantRan, ran)
			if tt.failAfter >= 0 {
				require.ErrorIs(t, err, errInjected)
				assert.ErrorContains(t, err, "failed to migrate to schema version 3 (test: every record updated at the marker time)")
				assert.Equal(t, before, dirFiles(t, dir), "all or nothing")
				return
			}
			require.NoError(t, err)
			require.NoError(t, tr.Close())
			assert.Equal(t, uint64(3), storeSchema(t, dir))
			ran = nil
			tr, err = schema1Start(t, dir)
			require.NoError(t, err)
			defer tr.Close()
			assert.Empty(t, ran, "migrated once")
			assert.Nil(t, tr.store.migrated)
			assert.Contains(t, tr.Status().RecoveryReason, schema1Recovery, "the fixture's own recovery, and no other: the seal is valid")
			got := tr.Records()
			for i := range got {
				// Every record the store held was rewritten; the others
				// came after (a leftover intent resolved at the start).
				assert.Equal(t, stored[got[i].ImageRef], got[i].Updated.Equal(marker), got[i].ImageRef)
				got[i].Updated = marker
			}
			assert.Equal(t, wantRecords, got)
		})
	}
}
