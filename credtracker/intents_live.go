package credtracker

import (
	bolt "go.etcd.io/bbolt"
)

// IntentLister lists the pull intents a running tracker's store holds,
// for `pullguard records` answered by serve: what ReadIntents reads from
// a store no tracker has open.
type IntentLister interface {
	// PendingIntents returns the pull intents in the store, sorted by
	// image: the pulls in flight, and those whose end could not be
	// written.
	PendingIntents() ([]PendingIntent, error)
}

var _ IntentLister = (*tracker)(nil)

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
