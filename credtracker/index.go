package credtracker

import (
	"hash/maphash"
	"sync"
)

// recordIndex maps an image ref to its immutable *ImageRecord. It is split
// into shards, each a plain map under its own RWMutex, padded to its own
// cache lines: a read takes one shard's read lock (readers never wait for
// each other, and rarely share a cache line), a write holds one shard's
// lock for a map assignment only, never across I/O. At 100 000 records a
// lookup costs two or three cache misses, where sync.Map's hash trie costs
// about six.
type recordIndex struct {
	seed   maphash.Seed
	shards [indexShards]indexShard
}

const indexShards = 64

type indexShard struct {
	mu sync.RWMutex
	m  map[string]*ImageRecord
	_  [64]byte // keep neighbouring shards' locks off this cache line
}

func newRecordIndex() *recordIndex {
	x := &recordIndex{seed: maphash.MakeSeed()}
	for i := range x.shards {
		x.shards[i].m = map[string]*ImageRecord{}
	}
	return x
}

func (x *recordIndex) shard(ref string) *indexShard {
	return &x.shards[maphash.String(x.seed, ref)%indexShards]
}

func (x *recordIndex) load(ref string) *ImageRecord {
	s := x.shard(ref)
	s.mu.RLock()
	r := s.m[ref]
	s.mu.RUnlock()
	return r
}

func (x *recordIndex) store(r *ImageRecord) {
	s := x.shard(r.ImageRef)
	s.mu.Lock()
	s.m[r.ImageRef] = r
	s.mu.Unlock()
}

func (x *recordIndex) delete(ref string) {
	s := x.shard(ref)
	s.mu.Lock()
	delete(s.m, ref)
	s.mu.Unlock()
}

// all returns every record. Records are immutable, so the caller may read
// them without a lock.
func (x *recordIndex) all() []*ImageRecord {
	var out []*ImageRecord
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		for _, r := range s.m {
			out = append(out, r)
		}
		s.mu.RUnlock()
	}
	return out
}
