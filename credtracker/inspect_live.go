package credtracker

import (
	"slices"

	bolt "go.etcd.io/bbolt"
)

// LiveInspector reads what a running tracker holds, for `pullguard
// records` answered by serve: what ReadRecords and ReadIntents read from a
// store no tracker has open.
type LiveInspector interface {
	// EachRecord calls fn with a copy of each record, sorted by image
	// ref, one at a time: unlike Records, it never holds a copy of every
	// record, and it is not a snapshot (a record pulled during the walk
	// may be seen or not; each record is seen whole). It stops at fn's
	// first error and returns it.
	EachRecord(fn func(ImageRecord) error) error
	// PendingIntents returns the pull intents in the store, sorted by
	// image: the pulls in flight, and those whose end could not be
	// written.
	PendingIntents() ([]PendingIntent, error)
}

var _ LiveInspector = (*tracker)(nil)

func (t *tracker) EachRecord(fn func(ImageRecord) error) error {
	// The refs under the write lock (the walk sees every record once),
	// then each record as readers load them, without it.
	t.writeMu.Lock()
	var refs []string
	t.images.each(func(g groupView) { refs = append(refs, string(g.appendRef(nil))) })
	t.writeMu.Unlock()
	slices.Sort(refs)
	for _, ref := range refs {
		r := t.images.load(ref)
		if r == nil {
			continue // pruned since
		}
		if err := fn(*r); err != nil {
			return err
		}
	}
	return nil
}

func (t *tracker) PendingIntents() ([]PendingIntent, error) {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	return t.store.intents()
}

// intents reads the store's intents in one read transaction (bbolt
// iterates keys in order: sorted by image).
func (s *store) intents() ([]PendingIntent, error) {
	out := []PendingIntent{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntents)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			in := PendingIntent{Image: string(k)}
			// As at start-up: the key names the image even when the value
			// does not decode.
			if _, since, err := decodeIntent(string(k), v); err == nil {
				in.Since = since
			}
			out = append(out, in)
			return nil
		})
	})
	if err != nil {
		return nil, wrapInspect("pull intents", s.path, err)
	}
	return out, nil
}
