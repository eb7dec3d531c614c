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
	// repos is derived from m: the entry of every (image ref, repository)
	// pair, so the decision reaches it with one lookup instead of two.
	repos map[refRepo]*RepositoryRecord
	_     [64]byte // keep neighbouring shards' locks off this cache line
}

type refRepo struct{ ref, repo string }

func newRecordIndex() *recordIndex {
	x := &recordIndex{seed: maphash.MakeSeed()}
	for i := range x.shards {
		x.shards[i].m = map[string]*ImageRecord{}
		x.shards[i].repos = map[refRepo]*RepositoryRecord{}
	}
	return x
}

// shard picks ref's shard. Image refs are nearly always digests, whose
// last characters are uniformly distributed hex: two of them pick the
// shard without hashing all 71 bytes. Anything shorter is hashed.
func (x *recordIndex) shard(ref string) *indexShard {
	if n := len(ref); n >= 16 {
		return &x.shards[(uint(ref[n-1])*31+uint(ref[n-2]))%indexShards]
	}
	return &x.shards[maphash.String(x.seed, ref)%indexShards]
}

func (x *recordIndex) load(ref string) *ImageRecord {
	s := x.shard(ref)
	s.mu.RLock()
	r := s.m[ref]
	s.mu.RUnlock()
	return r
}

// storeAll adds records in bulk at start-up, sizing the shards' maps
// once. It must not run concurrently with other uses of the index.
func (x *recordIndex) storeAll(recs []*ImageRecord) {
	per := len(recs)/indexShards + len(recs)/(4*indexShards) + 1
	for i := range x.shards {
		s := &x.shards[i]
		if len(s.m) == 0 {
			s.m = make(map[string]*ImageRecord, per)
			s.repos = make(map[refRepo]*RepositoryRecord, per)
		}
	}
	for _, r := range recs {
		s := x.shard(r.ImageRef)
		s.dropRepos(s.m[r.ImageRef])
		s.m[r.ImageRef] = r
		for repo, rr := range r.Repositories {
			s.repos[refRepo{r.ImageRef, repo}] = rr
		}
	}
}

// loadRepository returns the entry for repo in ref's record, or nil.
func (x *recordIndex) loadRepository(ref, repo string) *RepositoryRecord {
	s := x.shard(ref)
	s.mu.RLock()
	rr := s.repos[refRepo{ref, repo}]
	s.mu.RUnlock()
	return rr
}

func (x *recordIndex) store(r *ImageRecord) {
	s := x.shard(r.ImageRef)
	s.mu.Lock()
	s.dropRepos(s.m[r.ImageRef])
	s.m[r.ImageRef] = r
	for repo, rr := range r.Repositories {
		s.repos[refRepo{r.ImageRef, repo}] = rr
	}
	s.mu.Unlock()
}

func (x *recordIndex) delete(ref string) {
	s := x.shard(ref)
	s.mu.Lock()
	s.dropRepos(s.m[ref])
	delete(s.m, ref)
	s.mu.Unlock()
}

func (s *indexShard) dropRepos(old *ImageRecord) {
	if old == nil {
		return
	}
	for repo := range old.Repositories {
		delete(s.repos, refRepo{old.ImageRef, repo})
	}
}

// len returns the number of records.
func (x *recordIndex) len() int {
	n := 0
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
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
