package criproxy

import "container/list"

// recent is a map bounded to max entries that forgets its least recent
// entry to make room for a new one: the entries in a container/list, the
// most recent at the front, and a map from each key to its element. put
// and get make an entry the most recent, peek leaves it in its place, so
// the order is of use (get) or of age (peek). Every operation is O(1), and
// a full map reuses the forgotten entry's element for the new one. It is
// not safe for concurrent use (podCalls.mu guards it).
//
// Not k8s.io/utils/lru: it has no look-up that leaves an entry in its
// place (an answer window goes by age, not by use), its eviction callback
// runs for an entry removed on purpose too, and it takes a lock of its own
// and boxes every key and value.
type recent[K comparable, V any] struct {
	max   int
	order list.List // of *recentEntry[K, V], the most recent first
	at    map[K]*list.Element
}

type recentEntry[K comparable, V any] struct {
	key K
	val V
}

// newRecent returns an empty map of at most n entries (at least one).
func newRecent[K comparable, V any](n int) *recent[K, V] {
	return &recent[K, V]{max: max(n, 1), at: make(map[K]*list.Element)}
}

func entryOf[K comparable, V any](e *list.Element) *recentEntry[K, V] {
	return e.Value.(*recentEntry[K, V])
}

// get returns k's value, to read or change in place, and makes k the most
// recent.
func (r *recent[K, V]) get(k K) (*V, bool) {
	e, ok := r.at[k]
	if !ok {
		return nil, false
	}
	r.order.MoveToFront(e)
	return &entryOf[K, V](e).val, true
}

// peek returns k's value, to read or change in place, leaving k in its
// place.
func (r *recent[K, V]) peek(k K) (*V, bool) {
	e, ok := r.at[k]
	if !ok {
		return nil, false
	}
	return &entryOf[K, V](e).val, true
}

// put sets k's value and makes k the most recent; added reports a new
// key. A new key in a full map takes the place of the least recent entry,
// which put returns (evicted).
func (r *recent[K, V]) put(k K, v V) (old recentEntry[K, V], evicted, added bool) {
	if e, ok := r.at[k]; ok {
		entryOf[K, V](e).val = v
		r.order.MoveToFront(e)
		return old, false, false
	}
	if len(r.at) >= r.max {
		e := r.order.Back()
		ent := entryOf[K, V](e)
		old = *ent
		delete(r.at, ent.key)
		ent.key, ent.val = k, v
		r.order.MoveToFront(e)
		r.at[k] = e
		return old, true, true
	}
	r.at[k] = r.order.PushFront(&recentEntry[K, V]{key: k, val: v})
	return old, false, true
}

// oldest returns the least recent entry, leaving it in its place.
func (r *recent[K, V]) oldest() (k K, v *V, ok bool) {
	e := r.order.Back()
	if e == nil {
		return k, nil, false
	}
	ent := entryOf[K, V](e)
	return ent.key, &ent.val, true
}

// remove forgets k.
func (r *recent[K, V]) remove(k K) {
	if e, ok := r.at[k]; ok {
		r.order.Remove(e)
		delete(r.at, k)
	}
}

// len is the number of entries.
func (r *recent[K, V]) len() int { return len(r.at) }
