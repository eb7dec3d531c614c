package credtracker

import (
	"hash/maphash"
	"runtime"
	"sync"
)

// pendingSlot is a slot to fill once the groups are in the arena: the hash
// of its (image ref, repository), the offset of its group or entry, and for
// a group's own slot the index of its record (-1 for an entry's).
type pendingSlot struct {
	h   uint64
	off int
	rec int
}

// bulkLoad fills the empty index with recs, in two passes on every core:
// the first sizes each worker's share of the records, the second encodes
// each share straight into its own range of one arena of the exact size
// (advised for huge pages before its first byte is written); the slots are
// then filled in one pass. It reports false, leaving the index empty, if
// two records have the same image ref (the store's keys are unique, so
// start-up never does); the caller then stores them one by one. s.mu is
// held, and s.ver is odd.
func (x *recordIndex) bulkLoad(s *indexState, recs []*ImageRecord) bool {
	workers := max(1, min(runtime.GOMAXPROCS(0), len(recs)/1024))
	per := (len(recs) + workers - 1) / workers
	sizes := make([]int, len(recs))
	bytes := make([]int, workers)
	entries := make([]int, workers)
	parallel(workers, func(w int) {
		for i := w * per; i < min(len(recs), (w+1)*per); i++ {
			sizes[i] = groupSize(recs[i])
			bytes[w] += sizes[i]
			entries[w] += 1 + len(recs[i].Repositories)
		}
	})
	total, slots := 0, 0
	for w := range workers {
		total += bytes[w]
		slots += entries[w]
	}
	t := &table{slots: newSlots(slots*1024/700 + 8), arena: newArena(total)[:total]}
	pending := make([][]pendingSlot, workers)
	parallel(workers, func(w int) {
		base := 0
		for v := range w {
			base += bytes[v]
		}
		lo, hi := min(len(recs), w*per), min(len(recs), (w+1)*per)
		pending[w] = x.encodeBulk(t.arena[base:base:base+bytes[w]], base, recs, sizes, lo, hi, make([]pendingSlot, 0, entries[w]))
	})
	for _, p := range pending {
		for _, ps := range p {
			if ps.rec < 0 {
				x.insert(s, t, ps.h, ps.off)
				continue
			}
			if old := x.insertGroup(s, t, ps.h, ps.off, recs[ps.rec].ImageRef); old >= 0 {
				s.used, s.entries = 0, 0
				return false
			}
		}
	}
	s.groups = len(recs)
	s.live = total
	t.collapse()
	s.tab.Store(t)
	return true
}

// encodeBulk encodes recs[lo:hi] into buf (empty, with exactly the room
// they need), which starts at offset base of the arena, and returns the
// slots to fill.
func (x *recordIndex) encodeBulk(buf []byte, base int, recs []*ImageRecord, sizes []int, lo, hi int, slots []pendingSlot) []pendingSlot {
	var offs []int
	var one [1]string
	for i := lo; i < hi; i++ {
		r := recs[i]
		repos := one[:0]
		if len(r.Repositories) == 1 {
			for repo := range r.Repositories {
				repos = append(repos, repo)
			}
		} else {
			repos = sortedKeys(r.Repositories)
		}
		buf, offs = appendGroup(buf, r, repos, sizes[i], offs[:0], x.seed)
		hr := maphash.String(x.seed, r.ImageRef)
		slots = append(slots, pendingSlot{h: x.pairHash(hr, ""), off: base + offs[0], rec: i})
		for k, repo := range repos {
			slots = append(slots, pendingSlot{h: x.pairHash(hr, repo), off: base + offs[k+1], rec: -1})
		}
	}
	return slots
}

// parallel runs fn(0), ..., fn(n-1) at once and waits for them.
func parallel(n int, fn func(w int)) {
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() { fn(w) })
	}
	wg.Wait()
}
