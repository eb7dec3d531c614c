package credtracker

import (
	"errors"
	"hash/maphash"
	"runtime"
	"sync"
)

// pendingSlot is a slot to fill once the groups are in the arena: the hash
// of its (image ref, repository), the offset of its group or entry, and for
// a group's own slot in bulkLoad the index of its record, whose ref is
// looked for among the groups placed before (-1 for an entry's slot, and
// in install, where the refs are the store's keys, unique).
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

// bulkPart is one start-up worker's share of the records, encoded for the
// index as the worker decodes them (see decodeContents): its groups in
// chunks (never copied while they fill), and the slots to fill for them,
// at offsets from the part's start.
type bulkPart struct {
	chunks [][]byte
	size   int // bytes in chunks
	slots  []pendingSlot
	groups int
	offs   []int // appendGroup's scratch
}

// bulkChunk is the size of a part's chunks.
const bulkChunk = 1 << 20

// prepare encodes r into p. Records are immutable: r may be dropped.
func (x *recordIndex) prepare(p *bulkPart, r *ImageRecord) {
	size := groupSize(r)
	n := len(p.chunks)
	if n == 0 || cap(p.chunks[n-1])-len(p.chunks[n-1]) < size {
		p.chunks = append(p.chunks, make([]byte, 0, max(bulkChunk, size)))
		n++
	}
	c := p.chunks[n-1]
	base := p.size - len(c) // the chunk's offset in the part
	var one [1]string
	repos := one[:0]
	if len(r.Repositories) == 1 {
		for repo := range r.Repositories {
			repos = append(repos, repo)
		}
	} else {
		repos = sortedKeys(r.Repositories)
	}
	p.chunks[n-1], p.offs = appendGroup(c, r, repos, size, p.offs[:0], x.seed)
	hr := maphash.String(x.seed, r.ImageRef)
	p.slots = append(p.slots, pendingSlot{h: x.pairHash(hr, ""), off: base + p.offs[0], rec: -1})
	for k, repo := range repos {
		p.slots = append(p.slots, pendingSlot{h: x.pairHash(hr, repo), off: base + p.offs[k+1], rec: -1})
	}
	p.size += size
	p.groups++
}

// errIndexNotEmpty: install is for start-up only.
var errIndexNotEmpty = errors.New("the record index is not empty")

// install fills the empty index with the records prepared by the start-up
// workers: one arena of the exact size (advised for huge pages before it
// is written), the parts' chunks copied into it, and the slots filled in
// one pass. The records' refs are the store's keys, which the store's
// structural check proves distinct.
func (x *recordIndex) install(parts []bulkPart) error {
	s := &x.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups != 0 || s.garbage != 0 {
		return errIndexNotEmpty
	}
	size, entries, groups := 0, 0, 0
	for i := range parts {
		size += parts[i].size
		entries += len(parts[i].slots)
		groups += parts[i].groups
	}
	if groups == 0 {
		return nil
	}
	s.ver.Add(1)
	defer s.ver.Add(1)
	t := &table{slots: newSlots(entries*1024/700 + 8), arena: newArena(size)}
	for i := range parts {
		base := len(t.arena)
		for _, c := range parts[i].chunks {
			t.arena = append(t.arena, c...)
		}
		for _, ps := range parts[i].slots {
			x.insert(s, t, ps.h, base+ps.off)
		}
		parts[i] = bulkPart{} // the chunks are garbage now
	}
	s.groups = groups
	s.live = size
	t.collapse()
	s.tab.Store(t)
	return nil
}
