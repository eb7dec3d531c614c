package credtracker

import (
	"errors"
	"fmt"
	"time"
)

// The store's schema version names the layout of the whole store: its
// buckets and keys, the seal, and the encoding of each value (whose own
// version byte, codec.go, is part of the schema). It is kept in the store,
// at meta/schema, and read first: right after the structural check, before
// the seal. So a store laid out by a newer pullguard (another bucket,
// another seal, values this version cannot decode) is told from a damaged
// one: it is refused, never set aside as unreadable; and an older store is
// migrated, in one transaction, never rebuilt.
//
// A store with no meta/schema is schema version 1: every store written
// before the version was recorded.
//
// What every schema keeps, so that an earlier pullguard can still read the
// version of a later store (the envelope; TestSchemaEnvelope pins it):
// records.db is a bbolt file of top-level buckets only, with no nested
// bucket and no key outside a bucket (what the structural check accepts);
// it has a bucket "meta" whose key "schema" holds the version as a
// credtracker value of version 1 and kind StoreSchema (4), whose payload is
// the version as a uvarint and whose CRC-32C covers the key; the hash key
// is in HashKeyFile. Anything else may change with a migration.
const schemaLegacy = 1

// keySchema is the meta bucket's key of the schema version.
var keySchema = []byte("schema")

// migration turns a store of schema version to-1 into one of version to.
// It runs inside the transaction that migrates the store, after the
// migrations before it and before the version is recorded: if it fails,
// the transaction is rolled back and the store stays as it was. It writes
// through w, which keeps the seal up to date. It returns an error only
// when it cannot write (or for a bug): a value it cannot convert is kept
// aside as an unreadable record would be (quarantine), never dropped.
// bbolt forbids changing a bucket while its ForEach runs: collect, then
// write.
type migration struct {
	to      uint64
	what    string
	migrate func(w *sealedTx) error
}

// schemaRegistry holds the migrations in order: the one at index i makes
// schema version i+2 from i+1. The next format change is one more entry.
type schemaRegistry []migration

// current is the schema version this pullguard writes.
func (r schemaRegistry) current() uint64 { return schemaLegacy + uint64(len(r)) }

// since returns the migrations that bring a store of schema version v to
// the current one.
func (r schemaRegistry) since(v uint64) []migration { return r[v-schemaLegacy:] }

// migrations is the store's history (a variable for the tests that add a
// migration of their own).
var migrations = schemaRegistry{
	// Schema 2 is schema 1 with its version recorded: the buckets, the
	// seal and every value stay as they are, and the migration records
	// the version.
	{to: 2, what: "record the store's schema version", migrate: func(*sealedTx) error { return nil }},
}

// migrationHook, when set (by this package's tests only), is called at
// each step of a migration with the step's name; an error fails the
// migration there.
var migrationHook func(step string) error

func migrationStep(step string) error {
	if migrationHook == nil {
		return nil
	}
	return migrationHook(step)
}

var (
	// ErrStoreTooNew is wrapped by the error of a store written by a newer
	// pullguard, with a schema version this one does not know. The store
	// is left as it is: its records are not lost, and the node does not
	// run with a store it cannot read.
	ErrStoreTooNew = errors.New("record store was written by a newer pullguard")
	// ErrStoreMigrationPending is wrapped by the error of an older store
	// read without changing it (ReadRecords): only a tracker's start
	// migrates it.
	ErrStoreMigrationPending = errors.New("record store is not migrated yet")
)

// StoreVersionError is a store whose schema version this pullguard does
// not read as it is: a newer one (ErrStoreTooNew), or an older one read
// without changing it (ErrStoreMigrationPending).
type StoreVersionError struct {
	// Path is the store file.
	Path string
	// Found is the store's schema version; Current this pullguard's.
	Found, Current uint64
}

func (e *StoreVersionError) Error() string {
	if e.Found > e.Current {
		return fmt.Sprintf("record store %s has schema version %d, written by a newer pullguard; this pullguard reads schema versions 1 to %d. "+
			"Nothing was changed and no record is lost: install the newer pullguard again; or, to start over, move the store aside "+
			"(mv %s %s.schema-%d) and start again, after which every image present on the node needs one verification with its registry before a pod may use it",
			e.Path, e.Found, e.Current, e.Path, e.Path, e.Found)
	}
	return fmt.Sprintf("record store %s has schema version %d, older than this pullguard's %d: pullguard serve or run migrates it at its next start, keeping every record; start it, then read the records again",
		e.Path, e.Found, e.Current)
}

func (e *StoreVersionError) Is(target error) bool {
	if e.Found > e.Current {
		return target == ErrStoreTooNew
	}
	return target == ErrStoreMigrationPending
}

// encodeSchema encodes the schema version: a StoreSchema value (see the
// envelope above; its encoding never changes).
func encodeSchema(v uint64) []byte {
	e := newEncoder(kindStoreSchema, 10)
	e.uvarint(v)
	return e.finish(string(keySchema))
}

// readSchema returns the schema version of a store whose structure was
// checked. A value that does not decode, or names a version never
// written, is damage; a newer version is a *StoreVersionError. The
// version is not trusted yet: an older one only leads to the seal's
// check, which covers it, and a newer one only to a refusal.
func readSchema(f *boltFile, path string) (uint64, error) {
	return readSchemaEntries(f.buckets[string(bucketMeta)], path)
}

// readSchemaEntries is readSchema on the entries of the meta bucket.
func readSchemaEntries(meta []boltEntry, path string) (uint64, error) {
	var raw []byte
	for _, e := range meta {
		if string(e.key) == string(keySchema) {
			raw = e.value
			break
		}
	}
	if raw == nil {
		return schemaLegacy, nil
	}
	d, err := newDecoder(string(keySchema), raw, kindStoreSchema)
	if err != nil {
		return 0, corrupt(checkSeal, path, fmt.Errorf("%w: the schema version entry is damaged: %v", errSealMismatch, err))
	}
	v := d.uvarint("schema version")
	if err := d.end(); err != nil {
		return 0, corrupt(checkSeal, path, fmt.Errorf("%w: the schema version entry is damaged: %v", errSealMismatch, err))
	}
	switch cur := migrations.current(); {
	case v <= schemaLegacy:
		// Version 1 is never written: it is the absence of the entry.
		return 0, corrupt(checkSeal, path, fmt.Errorf("%w: the store names schema version %d, which is never recorded", errSealMismatch, v))
	case v > cur:
		return 0, &StoreVersionError{Path: path, Found: v, Current: cur}
	}
	return v, nil
}

// migrate brings the store, open for writing, from schema version from
// to the current one in one transaction (sealed and counted in the
// generation file as any write): every migration since from, then the
// new version. A failure, or a crash, at any point before the commit
// leaves the store as it was.
func (s *store) migrate(from uint64) error {
	cur := migrations.current()
	err := migrationStep("opened")
	if err != nil {
		return fmt.Errorf("failed to migrate record store %s from schema version %d to %d: %w", s.path, from, cur, err)
	}
	err = s.update(func(w *sealedTx) error {
		for _, m := range migrations.since(from) {
			if err := migrationStep(fmt.Sprintf("migrating to %d", m.to)); err != nil {
				return err
			}
			if err := m.migrate(w); err != nil {
				return fmt.Errorf("failed to migrate to schema version %d (%s): %w", m.to, m.what, err)
			}
		}
		if err := migrationStep(fmt.Sprintf("recording schema %d", cur)); err != nil {
			return err
		}
		if err := w.put(bucketMeta, keySchema, encodeSchema(cur)); err != nil {
			return err
		}
		return migrationStep("committing")
	})
	if err != nil {
		return fmt.Errorf("failed to migrate record store %s from schema version %d to %d: %w", s.path, from, cur, err)
	}
	return migrationStep("committed")
}

// migrated says what a start migrated, for its log line.
type migrated struct {
	from, to uint64
	took     time.Duration
}
