package credtracker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/pullguard/pullguard/internal/durable"
)

// The store is one bbolt file with three buckets. Every change is one
// transaction, fsynced before it returns (bbolt's default), so after a
// crash the file holds the state before or after it, never a mix. Every
// transaction also updates the store's seal (seal.go) and, once
// committed, the generation file (genfile.go).
//
// bbolt is never the first to read the file: openStore reads it with plain
// reads, checks its structure (boltfile.go), its schema version
// (schema.go) and its seal, and decodes it, and only then lets bbolt map
// it for the writes to come (and, for an older schema, the migration).
var (
	bucketPulled  = []byte("pulled")  // image ref -> ImagePulledRecord
	bucketIntents = []byte("intents") // normalized image -> ImagePullIntent
	bucketMeta    = []byte("meta")    // "schema" -> schema version; "status" -> StoreStatus; "seal" -> seal; "quarantine/<ref>" -> unreadable bytes
	keyStatus     = []byte("status")
)

const quarantinePrefix = "quarantine/"

// errStoreCorrupt marks an open or read failure that means the file cannot
// be trusted (as opposed to being busy or not permitted).
var errStoreCorrupt = errors.New("record store is unreadable")

// storeCorruptError says which integrity check failed (the label of the
// integrity-failure metric) and why, in words that never quote the file.
type storeCorruptError struct {
	check string
	msg   string
}

func (e *storeCorruptError) Error() string        { return errStoreCorrupt.Error() + ": " + e.msg }
func (e *storeCorruptError) Is(target error) bool { return target == errStoreCorrupt }

// Integrity checks, the values of the check label.
const (
	checkStructure  = "structure"  // not a well-formed store file
	checkSeal       = "seal"       // an entry added, removed or changed; another node's store
	checkGeneration = "generation" // an older copy of the store; a damaged generation file
	checkMissing    = "missing"    // no store, or an empty one, where one should be
	checkDecode     = "decode"     // a sealed value that does not decode
)

func corrupt(check, path string, err error) error {
	return &storeCorruptError{check: check, msg: fmt.Sprintf("%s: %v", path, err)}
}

type store struct {
	db     *bolt.DB
	path   string
	sealer *sealer
	gen    *genFile
	seal   seal
	// loaded is what openStore read; load hands it out once.
	loaded contents
	// migrated is set when openStore migrated the store.
	migrated *migrated
}

// openStore reads and verifies the store at path against the generation
// file, then (unless readOnly) opens it with bbolt for writing. An error
// wrapping errStoreCorrupt means the file is not the store this node last
// wrote; fs.ErrNotExist that there is no file; a *StoreVersionError
// that its schema version is newer than this pullguard's (and, read-only,
// older). A store of an older schema version is migrated, then read
// again. With idx, the records are prepared for idx as they are decoded
// (see decodeContents).
func openStore(path string, sl *sealer, gen *genFile, readOnly bool, idx *recordIndex) (*store, error) {
	var from *migrated
	for {
		data, err := readStoreFile(path)
		if err != nil {
			return nil, err
		}
		v, err := verifyStore(data, path, sl, gen, idx)
		if err != nil {
			return nil, err
		}
		cur := migrations.current()
		if v.schema < cur && (readOnly || from != nil) {
			// (A migrated store that is still old would be a bug: it is
			// refused, not migrated in a loop.)
			return nil, &StoreVersionError{Path: path, Found: v.schema, Current: cur}
		}
		s := &store{path: path, sealer: sl, gen: gen, seal: v.seal, loaded: v.contents, migrated: from}
		if readOnly {
			return s, nil
		}
		if err := s.openBolt(v.txid); err != nil {
			return nil, err
		}
		if v.schema == cur {
			return s, nil
		}
		start := time.Now()
		err = s.migrate(v.schema)
		if cerr := s.db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		from = &migrated{from: v.schema, to: cur, took: time.Since(start)}
	}
}

// openBolt opens the verified store with bbolt, for writing; txid is the
// transaction id the verification read.
func (s *store) openBolt(txid uint64) (err error) {
	// A Go panic in bbolt is not expected on a file that passed the
	// checks; if one comes, it means the same as a failed check.
	defer func() {
		if p := recover(); p != nil {
			if s.db != nil {
				s.db.Close()
				s.db = nil
			}
			err = corrupt(checkStructure, s.path, errors.New("bbolt panicked opening the file"))
		}
	}()
	db, err := bolt.Open(s.path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return fmt.Errorf("failed to open record store %s: locked by another process", s.path)
		}
		return corrupt(checkStructure, s.path, err)
	}
	s.db = db
	// The generation file's lock keeps other pullguards out; this catches
	// anything else that changed the file since it was read.
	var dbTxid uint64
	_ = db.View(func(tx *bolt.Tx) error { dbTxid = uint64(tx.ID()); return nil })
	if dbTxid != txid {
		db.Close()
		s.db = nil
		return corrupt(checkStructure, s.path, errors.New("the file changed while it was opened"))
	}
	if s.seal.gen > s.gen.gen {
		// A crash came between a commit and its generation's write.
		if err := s.gen.write(s.seal.gen, true); err != nil {
			db.Close()
			s.db = nil
			return err
		}
	}
	return nil
}

// verified is what verifyStore found in a store file.
type verified struct {
	contents contents
	seal     seal
	txid     uint64 // bbolt's transaction id
	schema   uint64
}

// verifyStore checks data, the bytes of the store file at path: its
// structure, its schema version, its seal, its generation against the
// generation file's; and decodes it, unless its schema version is older
// than this pullguard's (it is then to be migrated, and contents is
// empty).
func verifyStore(data []byte, path string, sl *sealer, gen *genFile, idx *recordIndex) (verified, error) {
	f, err := parseBoltFile(data)
	if err != nil {
		return verified{}, corrupt(checkStructure, path, err)
	}
	schema, err := readSchema(f, path)
	if err != nil {
		return verified{}, err
	}
	workers := runtime.GOMAXPROCS(0)
	st, err := sl.verify(f, workers)
	if err != nil {
		return verified{}, corrupt(checkSeal, path, err)
	}
	switch {
	case gen.damaged != nil:
		return verified{}, corrupt(checkGeneration, path, gen.damaged)
	case !gen.existed:
		// createStore writes the generation file before the store is
		// renamed into place: a store without one was put there.
		return verified{}, corrupt(checkGeneration, path, errors.New("the node's generation file is missing"))
	case st.gen < gen.gen:
		return verified{}, corrupt(checkGeneration, path, fmt.Errorf("store generation %d is older than the node's %d: an older copy of the store was put in its place", st.gen, gen.gen))
	}
	v := verified{seal: st, txid: f.txid, schema: schema}
	if schema < migrations.current() {
		return v, nil
	}
	v.contents, err = decodeContents(f, workers, idx)
	if err != nil {
		return verified{}, corrupt(checkDecode, path, err)
	}
	return v, nil
}

// readStoreFile reads the whole file with plain reads (never a memory map),
// bounded by maxStoreSize.
func readStoreFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to open record store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("failed to open record store: %w", err)
	}
	switch size := fi.Size(); {
	case size == 0:
		return nil, corrupt(checkMissing, path, errors.New("the file is empty"))
	case size > maxStoreSize:
		return nil, corrupt(checkStructure, path, fmt.Errorf("%d bytes is more than the %d a store may have", size, int64(maxStoreSize)))
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, corrupt(checkStructure, path, fmt.Errorf("failed to read: %w", err))
	}
	return data, nil
}

// createStore makes a new, empty, sealed store at path with status st
// (when st is not nil), under a temporary name renamed into place. Its
// generation is above every generation the node has had: the generation
// file's, and the clock's, so that no earlier store is ever taken for it.
func createStore(path string, sl *sealer, gen *genFile, st *storeStatus, noSync bool) error {
	tmp := path + ".new"
	_ = os.Remove(tmp) // a leftover of an interrupted creation
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout, NoSync: noSync})
	if err != nil {
		return fmt.Errorf("failed to create record store %s: %w", tmp, err)
	}
	next := seal{gen: max(gen.gen+1, uint64(time.Now().UnixNano()))}
	err = db.Update(func(tx *bolt.Tx) error {
		w := &sealedTx{tx: tx, mac: sl.newEntryMAC(), next: &next}
		for _, b := range [][]byte{bucketPulled, bucketIntents, bucketMeta} {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		if err := w.put(bucketMeta, keySchema, encodeSchema(migrations.current())); err != nil {
			return err
		}
		if st != nil {
			if err := w.put(bucketMeta, keyStatus, encodeStatus(*st)); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySeal, sl.encode(next))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = gen.write(next.gen, !noSync)
	}
	if err == nil {
		// bbolt fsynced the file at its commit (unless noSync): the
		// rename and the directory's fsync are what remains.
		var opts []durable.Option
		if noSync {
			opts = append(opts, durable.NoSync())
		}
		err = durable.Rename(tmp, path, opts...)
	}
	if err != nil {
		return fmt.Errorf("failed to create record store %s: %w", path, err)
	}
	return nil
}

func (s *store) close() error {
	var err error
	if s.db != nil {
		err = s.db.Close()
	}
	if gerr := s.gen.close(); err == nil {
		err = gerr
	}
	return err
}

// contents is everything read from the store at start-up.
type contents struct {
	// records are the readable records, or, when the store was opened for
	// an index, prepared holds them already encoded for it (see
	// decodeContents).
	records    []*ImageRecord
	prepared   []bulkPart
	unreadable map[string]error // image ref -> why its record was not trusted
	intents    map[string]bool  // normalized image -> true
	// intentSince is when each intent's pull started, where its value
	// says (for `pullguard records`; the decision never reads it).
	intentSince map[string]time.Time
	status      storeStatus
}

// numRecords is the number of readable records.
func (c *contents) numRecords() int {
	n := len(c.records)
	for i := range c.prepared {
		n += len(c.prepared[i].gslots)
	}
	return n
}

// load returns what openStore read.
func (s *store) load() (contents, error) {
	c := s.loaded
	s.loaded = contents{}
	return c, nil
}

// update is one durable transaction: fn changes entries through a
// sealedTx, which keeps the seal up to date; the seal is written last, in
// the same transaction, and the generation file after the commit.
func (s *store) update(fn func(w *sealedTx) error) (err error) {
	defer func() {
		// bbolt rolls the transaction back before the panic reaches here.
		if p := recover(); p != nil {
			err = errors.New("the record store's write failed: bbolt panicked")
		}
	}()
	next := s.seal
	next.gen++
	err = s.db.Update(func(tx *bolt.Tx) error {
		w := &sealedTx{tx: tx, mac: s.sealer.newEntryMAC(), next: &next}
		if err := fn(w); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySeal, s.sealer.encode(next))
	})
	if err != nil {
		return err
	}
	s.seal = next
	if err := s.gen.write(next.gen, !s.db.NoSync); err != nil {
		return fmt.Errorf("the record store was written but its generation was not: %w", err)
	}
	return nil
}

func (s *store) putIntent(key string, since time.Time) error {
	return s.update(func(w *sealedTx) error {
		return w.put(bucketIntents, []byte(key), encodeIntent(key, since))
	})
}

func (s *store) deleteIntent(key string) error {
	return s.update(func(w *sealedTx) error {
		return w.del(bucketIntents, []byte(key))
	})
}

// putRecord stores r and, if intentKey is not empty, removes that intent
// in the same transaction.
func (s *store) putRecord(r *ImageRecord, intentKey string) error {
	data := encodeRecord(r)
	return s.update(func(w *sealedTx) error {
		if err := w.put(bucketPulled, []byte(r.ImageRef), data); err != nil {
			return err
		}
		if intentKey != "" {
			return w.del(bucketIntents, []byte(intentKey))
		}
		return nil
	})
}

// apply stores every record in put, deletes every record in del and every
// intent in delIntents, in one transaction.
func (s *store) apply(put []*ImageRecord, del, delIntents []string) error {
	if len(put) == 0 && len(del) == 0 && len(delIntents) == 0 {
		return nil
	}
	return s.update(func(w *sealedTx) error {
		for _, r := range put {
			if err := w.put(bucketPulled, []byte(r.ImageRef), encodeRecord(r)); err != nil {
				return err
			}
		}
		for _, ref := range del {
			if err := w.del(bucketPulled, []byte(ref)); err != nil {
				return err
			}
		}
		for _, key := range delIntents {
			if err := w.del(bucketIntents, []byte(key)); err != nil {
				return err
			}
		}
		return nil
	})
}

// quarantine keeps the unreadable bytes of a record under the meta bucket
// for inspection and replaces the record with r, in one transaction.
func (s *store) quarantine(r *ImageRecord) error {
	return s.update(func(w *sealedTx) error {
		key := []byte(r.ImageRef)
		if old := w.tx.Bucket(bucketPulled).Get(key); old != nil {
			if err := w.put(bucketMeta, []byte(quarantinePrefix+r.ImageRef), append([]byte(nil), old...)); err != nil {
				return err
			}
		}
		return w.put(bucketPulled, key, encodeRecord(r))
	})
}

// seed stores every record in put and the status st, in one transaction.
func (s *store) seed(put []*ImageRecord, st storeStatus) error {
	return s.update(func(w *sealedTx) error {
		for _, r := range put {
			if err := w.put(bucketPulled, []byte(r.ImageRef), encodeRecord(r)); err != nil {
				return err
			}
		}
		return w.put(bucketMeta, keyStatus, encodeStatus(st))
	})
}

func (s *store) putStatus(st storeStatus) error {
	return s.update(func(w *sealedTx) error {
		return w.put(bucketMeta, keyStatus, encodeStatus(st))
	})
}

// decodeContents decodes every object of a verified store, on every core:
// start-up time is decoding time. A record that does not decode is
// returned in unreadable, not failed on.
//
// With an index (the tracker's start-up), each worker encodes the records
// it decodes into the index's compact form at once (contents.prepared),
// and drops them: the heap then never holds every decoded record at the
// same time, and the garbage collector has almost nothing to mark
// while the store loads. Without one (inspection), it returns the records.
func decodeContents(f *boltFile, workers int, idx *recordIndex) (contents, error) {
	c := contents{unreadable: map[string]error{}, intents: map[string]bool{}}
	raw := f.buckets[string(bucketPulled)]
	var recs []*ImageRecord
	if idx == nil {
		recs = make([]*ImageRecord, len(raw))
	}
	errs := make([]error, len(raw))
	workers = max(1, min(workers, 1+len(raw)/1024))
	parts := make([]bulkPart, workers)
	done := make(chan struct{}, workers)
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := w; i < len(raw); i += workers {
				r, err := decodeRecord(string(raw[i].key), raw[i].value)
				switch {
				case err != nil:
					errs[i] = err
				case idx != nil:
					idx.prepare(&parts[w], r)
				default:
					recs[i] = r
				}
			}
		}()
	}
	for range workers {
		<-done
	}
	if idx != nil {
		c.prepared = parts
	}
	for i, err := range errs {
		if err != nil {
			c.unreadable[string(raw[i].key)] = err
		} else if idx == nil {
			c.records = append(c.records, recs[i])
		}
	}
	for _, e := range f.buckets[string(bucketIntents)] {
		// The key names the image even when the value is unreadable,
		// and an intent only ever asks for more verification.
		c.intents[string(e.key)] = true
		if _, since, err := decodeIntent(string(e.key), e.value); err == nil && !since.IsZero() {
			if c.intentSince == nil {
				c.intentSince = map[string]time.Time{}
			}
			c.intentSince[string(e.key)] = since
		}
	}
	for _, e := range f.buckets[string(bucketMeta)] {
		if string(e.key) != string(keyStatus) {
			continue
		}
		st, err := decodeStatus(e.value)
		if err != nil {
			// Assume the worst that an unreadable status can hide: a
			// seed still pending.
			st = storeStatus{RecoveryReason: "store status unreadable: " + err.Error(), SeedPending: true}
		}
		c.status = st
	}
	return c, nil
}
