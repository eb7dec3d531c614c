package credtracker

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The store is one bbolt file with three buckets. Every change is one
// transaction, fsynced before it returns (bbolt's default), so after a
// crash the file holds the state before or after it, never a mix.
var (
	bucketPulled  = []byte("pulled")  // image ref -> ImagePulledRecord
	bucketIntents = []byte("intents") // normalized image -> ImagePullIntent
	bucketMeta    = []byte("meta")    // "status" -> StoreStatus; "quarantine/<ref>" -> unreadable bytes
	keyStatus     = []byte("status")
)

const quarantinePrefix = "quarantine/"

// errStoreCorrupt marks an open or read failure that means the file cannot
// be trusted (as opposed to being busy or not permitted).
var errStoreCorrupt = errors.New("record store is unreadable")

type store struct {
	db   *bolt.DB
	path string
}

// openStore opens (creating if needed) the store at path. An error wrapping
// errStoreCorrupt means the file exists but is not a usable store.
func openStore(path string, readOnly bool) (s *store, err error) {
	defer func() {
		// bbolt may panic on a corrupt file rather than return an error.
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("%w: %s: %v", errStoreCorrupt, path, p)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, ReadOnly: readOnly})
	if err != nil {
		switch {
		case errors.Is(err, bolterrors.ErrTimeout):
			return nil, fmt.Errorf("failed to open record store %s: locked by another process", path)
		case errors.Is(err, fs.ErrPermission), errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("failed to open record store: %w", err)
		default:
			return nil, fmt.Errorf("%w: %s: %v", errStoreCorrupt, path, err)
		}
	}
	s = &store{db: db, path: path}
	if readOnly {
		return s, nil
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketPulled, bucketIntents, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: %s: %v", errStoreCorrupt, path, err)
	}
	return s, nil
}

func (s *store) close() error { return s.db.Close() }

// contents is everything read from the store at start-up.
type contents struct {
	records    []*ImageRecord
	unreadable map[string]error // image ref -> why its record was not trusted
	intents    map[string]bool  // normalized image -> true
	status     storeStatus
}

// load reads every object. A record that does not decode is returned in
// unreadable, not failed on; a failure to walk the file at all wraps
// errStoreCorrupt.
func (s *store) load() (c contents, err error) {
	c = contents{unreadable: map[string]error{}, intents: map[string]bool{}}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %v", errStoreCorrupt, s.path, p)
		}
	}()
	err = s.db.View(func(tx *bolt.Tx) error {
		pulled, intents, meta := tx.Bucket(bucketPulled), tx.Bucket(bucketIntents), tx.Bucket(bucketMeta)
		if pulled == nil || intents == nil || meta == nil {
			return errors.New("missing buckets")
		}
		var err error
		c.records, err = decodeAll(pulled, c.unreadable)
		if err != nil {
			return err
		}
		if err := intents.ForEach(func(k, v []byte) error {
			// The key names the image even when the value is unreadable,
			// and an intent only ever asks for more verification.
			_, _ = decodeIntent(string(k), v)
			c.intents[string(k)] = true
			return nil
		}); err != nil {
			return err
		}
		if v := meta.Get(keyStatus); v != nil {
			st, err := decodeStatus(v)
			if err != nil {
				// Assume the worst that an unreadable status can hide:
				// a seed still pending.
				st = storeStatus{RecoveryReason: "store status unreadable: " + err.Error(), SeedPending: true}
			}
			c.status = st
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStoreCorrupt) {
		err = fmt.Errorf("%w: %s: %v", errStoreCorrupt, s.path, err)
	}
	return c, err
}

// decodeAll decodes every record of the bucket, on every core: start-up
// time is decoding time. The values are bbolt's memory-mapped pages, valid
// until the read transaction ends, which is after decodeAll returns.
// Records that do not decode are put in unreadable.
func decodeAll(b *bolt.Bucket, unreadable map[string]error) ([]*ImageRecord, error) {
	type kv struct{ k, v []byte }
	var raw []kv
	if err := b.ForEach(func(k, v []byte) error {
		raw = append(raw, kv{k, v})
		return nil
	}); err != nil {
		return nil, err
	}
	recs := make([]*ImageRecord, len(raw))
	errs := make([]error, len(raw))
	workers := min(runtime.GOMAXPROCS(0), 1+len(raw)/1024)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(raw); i += workers {
				recs[i], errs[i] = decodeRecord(string(raw[i].k), raw[i].v)
			}
		}()
	}
	wg.Wait()
	out := recs[:0]
	for i, r := range recs {
		if errs[i] != nil {
			unreadable[string(raw[i].k)] = errs[i]
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// update is one durable transaction over the three buckets.
func (s *store) update(fn func(pulled, intents, meta *bolt.Bucket) error) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return fn(tx.Bucket(bucketPulled), tx.Bucket(bucketIntents), tx.Bucket(bucketMeta))
	})
}

func (s *store) putIntent(key string) error {
	return s.update(func(_, intents, _ *bolt.Bucket) error {
		return intents.Put([]byte(key), encodeIntent(key))
	})
}

func (s *store) deleteIntent(key string) error {
	return s.update(func(_, intents, _ *bolt.Bucket) error {
		return intents.Delete([]byte(key))
	})
}

// putRecord stores r and, if intentKey is not empty, removes that intent
// in the same transaction.
func (s *store) putRecord(r *ImageRecord, intentKey string) error {
	data := encodeRecord(r)
	return s.update(func(pulled, intents, _ *bolt.Bucket) error {
		if err := pulled.Put([]byte(r.ImageRef), data); err != nil {
			return err
		}
		if intentKey != "" {
			return intents.Delete([]byte(intentKey))
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
	return s.update(func(pulled, intents, _ *bolt.Bucket) error {
		for _, r := range put {
			if err := pulled.Put([]byte(r.ImageRef), encodeRecord(r)); err != nil {
				return err
			}
		}
		for _, ref := range del {
			if err := pulled.Delete([]byte(ref)); err != nil {
				return err
			}
		}
		for _, key := range delIntents {
			if err := intents.Delete([]byte(key)); err != nil {
				return err
			}
		}
		return nil
	})
}

// quarantine keeps the unreadable bytes of a record under the meta bucket
// for inspection and replaces the record with r, in one transaction.
func (s *store) quarantine(r *ImageRecord) error {
	return s.update(func(pulled, _, meta *bolt.Bucket) error {
		key := []byte(r.ImageRef)
		if old := pulled.Get(key); old != nil {
			if err := meta.Put([]byte(quarantinePrefix+r.ImageRef), append([]byte(nil), old...)); err != nil {
				return err
			}
		}
		return pulled.Put(key, encodeRecord(r))
	})
}

func (s *store) putStatus(st storeStatus) error {
	return s.update(func(_, _, meta *bolt.Bucket) error {
		return meta.Put(keyStatus, encodeStatus(st))
	})
}
