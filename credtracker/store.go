package credtracker

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"sync"
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
		v, err := verifyStoreFile(path, sl, gen, idx)
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
	storeMaxBytes.Set(maxStoreSize)
	showSize(db)
	return nil
}

// showSize sets the store_bytes gauge to db's size in use.
func showSize(db *bolt.DB) {
	_ = db.View(func(tx *bolt.Tx) error { storeBytes.Set(float64(tx.Size())); return nil })
}

// verified is what verifyStore found in a store file.
type verified struct {
	contents contents
	seal     seal
	txid     uint64 // bbolt's transaction id
	schema   uint64
}

// verifyStoreFile checks the store file at path as verifyStore checks
// its bytes, reading it a page at a time with plain reads (never a memory
// map): what the start-up holds of the file at once is storeLoadBuffer
// bytes, whatever the file's size.
func verifyStoreFile(path string, sl *sealer, gen *genFile, idx *recordIndex) (verified, error) {
	f, err := os.Open(path)
	if err != nil {
		return verified{}, fmt.Errorf("failed to open record store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return verified{}, fmt.Errorf("failed to open record store: %w", err)
	}
	switch size := fi.Size(); {
	case size == 0:
		return verified{}, corrupt(checkMissing, path, errors.New("the file is empty"))
	case size > maxStoreSize:
		return verified{}, corrupt(checkStructure, path, fmt.Errorf("%d bytes is more than the %d a store may have", size, int64(maxStoreSize)))
	}
	l := newLoader(sl, idx, path, runtime.GOMAXPROCS(0))
	return l.verify(newFilePages(f, uint64(fi.Size()), storeLoadBuffer, l.flush), gen)
}

// verifyStore checks data, the bytes of the store file at path: its
// structure, its schema version, its seal, its generation against the
// generation file's; and decodes it, unless its schema version is older
// than this pullguard's (it is then to be migrated, and contents is
// empty).
func verifyStore(data []byte, path string, sl *sealer, gen *genFile, idx *recordIndex) (verified, error) {
	l := newLoader(sl, idx, path, runtime.GOMAXPROCS(0))
	return l.verify(memPages(data), gen)
}

// storeLoadBuffer is the size of the buffer the buckets' pages are read
// into at start-up, and decoded from a batch at a time (a variable for
// the tests).
var storeLoadBuffer = 2 << 20

// loadHook, when set (by this package's tests only), is called before
// each batch of a start-up's read is decoded.
var loadHook func()

// loader reads a store in one pass (scanBoltFile's visitor): it MACs
// every entry for the seal's check, keeps the meta and intents buckets
// (small), and decodes the records of each batch of pages on every core,
// done with the batch's bytes before the next batch is read. With an
// index, each worker encodes the records it decodes into the index's
// compact form at once (contents.prepared) and drops them: the heap never
// holds the file, nor every decoded record. What was decoded is only used
// once the whole file has passed every check.
type loader struct {
	sl      *sealer
	idx     *recordIndex
	path    string
	workers int
	mac     *entryMAC   // the meta and intents buckets'
	macs    []*entryMAC // the workers'
	sums    []digest    // the workers'
	parts   []bulkPart  // the workers'

	got           seal // the sum and count of the entries MACed
	stored        []byte
	meta, intents []boltEntry // copies
	batch         []boltEntry // in the pages' batch buffer
	errs          []error
	schemaRead    bool
	decode        bool
	records       []*ImageRecord
	unreadable    map[string]error
}

func newLoader(sl *sealer, idx *recordIndex, path string, workers int) *loader {
	workers = max(1, workers)
	l := &loader{sl: sl, idx: idx, path: path, workers: workers,
		sums: make([]digest, workers), parts: make([]bulkPart, workers), unreadable: map[string]error{}}
	if sl != nil { // decodeContents verifies nothing
		l.mac = sl.newEntryMAC()
		for range workers {
			l.macs = append(l.macs, sl.newEntryMAC())
		}
	}
	return l
}

func (l *loader) entry(bucket string, k, v []byte) error {
	switch bucket {
	case string(bucketPulled):
		l.batch = append(l.batch, boltEntry{k, v})
		return nil
	case string(bucketMeta):
		if string(k) == string(keySeal) {
			l.stored = bytes.Clone(v)
			return nil
		}
		l.meta = append(l.meta, boltEntry{bytes.Clone(k), bytes.Clone(v)})
	case string(bucketIntents):
		l.intents = append(l.intents, boltEntry{bytes.Clone(k), bytes.Clone(v)})
	default:
		// The seal's check refuses a store with another bucket.
		return nil
	}
	l.got.count++
	l.got.sum.xor(l.mac.sum(bucketID([]byte(bucket)), k, v))
	return nil
}

// flush MACs and decodes the batch of records read since the last flush.
// The store's buckets are in name order: the meta bucket, which holds
// the schema version, is read before the first record.
func (l *loader) flush() error {
	batch := l.batch
	if len(batch) == 0 {
		return nil
	}
	l.batch = l.batch[:0]
	if loadHook != nil {
		loadHook()
	}
	if !l.schemaRead {
		l.schemaRead = true
		v, err := readSchemaEntries(l.meta, l.path)
		l.decode = err == nil && v == migrations.current()
	}
	l.errs = append(l.errs[:0], make([]error, len(batch))...)
	var recs []*ImageRecord
	if l.decode && l.idx == nil {
		recs = make([]*ImageRecord, len(batch))
	}
	nw := max(1, min(l.workers, 1+len(batch)/256))
	var wg sync.WaitGroup
	for w := range nw {
		wg.Go(func() {
			var m *entryMAC
			if l.macs != nil {
				m = l.macs[w]
			}
			for i := w; i < len(batch); i += nw {
				e := batch[i]
				if m != nil {
					l.sums[w].xor(m.sum(idPulled, e.key, e.value))
				}
				if !l.decode {
					continue
				}
				r, err := decodeRecord(string(e.key), e.value)
				switch {
				case err != nil:
					l.errs[i] = err
				case l.idx != nil:
					l.idx.prepare(&l.parts[w], r)
				default:
					recs[i] = r
				}
			}
		})
	}
	wg.Wait()
	l.got.count += uint64(len(batch))
	for i, err := range l.errs {
		if err != nil {
			l.unreadable[string(batch[i].key)] = err
		} else if recs != nil {
			l.records = append(l.records, recs[i])
		}
	}
	clear(batch) // the batch buffer is reused: keep no slice of it
	return nil
}

// verify reads the store from src and checks it: its structure, its
// schema version, its seal, its generation against gen's.
func (l *loader) verify(src boltPages, gen *genFile) (verified, error) {
	f, err := scanBoltFile(src, l.entry)
	if err == nil {
		err = l.flush()
	}
	if err != nil {
		return verified{}, corrupt(checkStructure, l.path, err)
	}
	schema, err := readSchemaEntries(l.meta, l.path)
	if err != nil {
		return verified{}, err
	}
	for _, d := range l.sums {
		l.got.sum.xor(d)
	}
	st, err := l.sl.check(f.names, l.stored, l.got)
	if err != nil {
		return verified{}, corrupt(checkSeal, l.path, err)
	}
	switch {
	case gen.damaged != nil:
		return verified{}, corrupt(checkGeneration, l.path, gen.damaged)
	case !gen.existed:
		// createStore writes the generation file before the store is
		// renamed into place: a store without one was put there.
		return verified{}, corrupt(checkGeneration, l.path, errors.New("the node's generation file is missing"))
	case st.gen < gen.gen:
		return verified{}, corrupt(checkGeneration, l.path, fmt.Errorf("store generation %d is older than the node's %d: an older copy of the store was put in its place", st.gen, gen.gen))
	}
	v := verified{seal: st, txid: f.txid, schema: schema}
	if schema < migrations.current() {
		return v, nil
	}
	if l.schemaRead && !l.decode {
		// Not in a file that passed the checks: its buckets are in order.
		return verified{}, corrupt(checkStructure, l.path, errors.New("the records were read before the schema version"))
	}
	v.contents = l.contents()
	return v, nil
}

// contents is what the loader decoded, once the store passed its checks.
func (l *loader) contents() contents {
	c := contents{unreadable: l.unreadable, intents: map[string]bool{}, records: l.records}
	if l.idx != nil {
		c.prepared = l.parts
	}
	for _, e := range l.intents {
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
	for _, e := range l.meta {
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
	return c
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

// compactAllocSize is how much bbolt grows a compaction's copy by when it
// needs more pages (its default, 16 MiB, would leave up to that much unused
// at the end of a copy larger than it). The store itself keeps the
// default: it grows with few truncations and syncs, and what it has
// allocated past its pages in use is not free pages (sparse).
const compactAllocSize = 1 << 20

// compactTxSize bounds each transaction of a compaction: what it holds in
// memory at once.
const compactTxSize = 1 << 20

// compactHook, when set (by this package's tests only), is called at each
// step of a compaction with the step's name; an error fails the
// compaction there.
var compactHook func(step string) error

func compactStep(step string) error {
	if compactHook == nil {
		return nil
	}
	return compactHook(step)
}

// usage returns the size of the store file, of its pages up to the
// highest one in use, and of the free pages among them.
func (s *store) usage() (size, pages, free int64, err error) {
	fi, err := os.Stat(s.path)
	if err != nil {
		return 0, 0, 0, err
	}
	_ = s.db.View(func(tx *bolt.Tx) error { pages = tx.Size(); return nil })
	// The read transaction's end updated the free page counts.
	st := s.db.Stats()
	free = int64(st.FreePageN+st.PendingPageN) * int64(s.db.Info().PageSize)
	return fi.Size(), pages, free, nil
}

// sparse says whether a store whose pages up to the highest in use take
// pages bytes, free of them free, is worth compacting: at least 1 MiB and
// a third of those pages would be given back. (bbolt reuses free pages
// for later writes; it has many only after a transaction that rewrote
// most records.)
func sparse(pages, free int64) bool {
	return free >= 1<<20 && free >= pages/3
}

// compaction is what compactIfSparse did.
type compaction struct {
	done         bool
	before, size int64 // the file's size
}

// compactIfSparse rewrites the store without its free pages when they are
// a large part of the file (sparse): a transaction that rewrites most
// records (an import, a migration, a seed) needs new pages for all of
// them while the old ones are still in use, and bbolt never shrinks its
// file. The entries are copied as they are (bbolt's Compact, in
// transactions of compactTxSize), so the seal and the generation stay
// valid; the copy is synced, then renamed over the store (internal/durable)
// and takes its place. A failure or a crash before the rename leaves the
// store as it was (and a temporary file the next compaction removes);
// after it, the compacted store, which holds the same entries.
func (s *store) compactIfSparse() (compaction, error) {
	size, pages, free, err := s.usage()
	if err != nil {
		return compaction{}, fmt.Errorf("failed to compact record store %s: %w", s.path, err)
	}
	c := compaction{before: size, size: size}
	if !sparse(pages, free) {
		return c, nil
	}
	db, err := s.compactTo(s.path + compactSuffix)
	if db == nil {
		return c, fmt.Errorf("failed to compact record store %s: %w", s.path, err)
	}
	// The copy is the store now (even if err says its directory's sync
	// failed): every later write goes to it.
	old := s.db
	s.db = db
	showSize(db)
	if cerr := old.Close(); err == nil {
		err = cerr
	}
	if fi, serr := os.Stat(s.path); serr == nil {
		c.size = fi.Size()
	}
	c.done = true
	if err == nil {
		err = compactStep("switched")
	}
	if err != nil {
		return c, fmt.Errorf("compacted record store %s: %w", s.path, err)
	}
	return c, nil
}

// compactSuffix names the copy a compaction makes beside the store.
const compactSuffix = ".compact"

// compactTo copies the store to tmp, syncs it and renames it over the
// store; it returns the copy, open, once it is the store (with an error
// if the rename's directory sync failed). Otherwise it returns nil, the
// store is as it was, and tmp is removed.
func (s *store) compactTo(tmp string) (_ *bolt.DB, err error) {
	_ = os.Remove(tmp) // a leftover of an interrupted compaction
	// No sync per transaction, nor when the file grows: one sync of the
	// whole copy before the rename.
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout, NoSync: true, NoGrowSync: true})
	if err != nil {
		return nil, err
	}
	renamed := false
	defer func() {
		if !renamed {
			db.Close()
			os.Remove(tmp)
		}
	}()
	allocSize := db.AllocSize // bbolt's default
	db.AllocSize = compactAllocSize
	if err := compactStep("copying"); err != nil {
		return nil, err
	}
	if err := bolt.Compact(db, s.db, compactTxSize); err != nil {
		return nil, err
	}
	if !s.db.NoSync {
		// The copy was written without a sync per transaction: one
		// fdatasync for all of them, before the rename.
		if err := db.Sync(); err != nil {
			return nil, err
		}
	}
	if err := compactStep("copied"); err != nil {
		return nil, err
	}
	var opts []durable.Option
	if s.db.NoSync {
		opts = append(opts, durable.NoSync())
	}
	err = durable.Rename(tmp, s.path, opts...)
	if _, serr := os.Stat(tmp); err != nil && !errors.Is(serr, fs.ErrNotExist) {
		return nil, err
	}
	// Renamed (if err is not nil, the directory's sync failed: the store
	// is the copy all the same).
	renamed = true
	db.NoSync, db.NoGrowSync, db.AllocSize = s.db.NoSync, s.db.NoGrowSync, allocSize
	if err == nil {
		err = compactStep("renamed")
	}
	return db, err
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
	showSize(s.db)
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

// decodeContents decodes every object of a verified store (f, read
// whole), as a start-up's loader does. A record that does not decode is
// returned in unreadable, not failed on. With an index, the records are
// prepared for it (contents.prepared); without one (inspection), they are
// returned.
func decodeContents(f *boltFile, workers int, idx *recordIndex) (contents, error) {
	l := newLoader(nil, idx, "", workers)
	l.schemaRead, l.decode = true, true
	l.meta, l.intents = f.buckets[string(bucketMeta)], f.buckets[string(bucketIntents)]
	l.batch = slices.Clone(f.buckets[string(bucketPulled)])
	if err := l.flush(); err != nil {
		return contents{}, err
	}
	return l.contents(), nil
}
