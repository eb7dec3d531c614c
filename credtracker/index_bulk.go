package credtracker

import (
	"errors"
	"hash/maphash"
	"runtime"
	"sync"
)

// Loading many records at once (start-up): each worker encodes its share
// of the records into a bulkPart (prepare), then install places the parts
// in one arena of the exact size and fills the slots in one pass.

// bulkPart is one worker's share of the records, encoded for the index:
// its groups in chunks (never copied while they fill), and the slots to
// fill for them, at offsets from the part's start.
type bulkPart struct {
	chunks [][]byte
	size   int           // bytes in chunks
	slots  []pendingSlot // the entries'
	gslots []pendingSlot // the groups', one per record
	offs   []int         // appendGroup's scratch
	coords *coordSet     // the coordinates the part's groups refer to
}

// pendingSlot is a slot to fill once the groups are in the arena: the hash
// of its (image ref, repository) and the offset of its group or entry.
type pendingSlot struct {
	h   uint64
	off int
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
	repos := repoNames(r, &one)
	if p.coords == nil {
		p.coords = newCoordSet(x.seed, 0)
	}
	p.chunks[n-1], p.offs = appendGroup(c, r, repos, size, p.offs[:0], p.coords)
	hr := maphash.String(x.seed, r.ImageRef)
	p.gslots = append(p.gslots, pendingSlot{h: x.pairHash(hr, ""), off: base + p.offs[0]})
	for k, repo := range repos {
		p.slots = append(p.slots, pendingSlot{h: x.pairHash(hr, repo), off: base + p.offs[k+1]})
	}
	p.size += size
}

// repoNames returns r's repository names in the order of its group's
// entries (sorted), in one's array when there is one name.
func repoNames(r *ImageRecord, one *[1]string) []string {
	if len(r.Repositories) != 1 {
		return sortedKeys(r.Repositories)
	}
	for repo := range r.Repositories {
		one[0] = repo
	}
	return one[:]
}

// errIndexFull: the records do not fit the index's 32-bit offsets.
var errIndexFull = errors.New("the records do not fit in memory's index (4 GiB)")

// errIndexNotEmpty: install fills an empty index only.
var errIndexNotEmpty = errors.New("the record index is not empty")

// install fills the empty index with prepared parts whose records have
// distinct refs (at start-up, the store's keys, which its structural check
// proves distinct): one arena of the exact size, the parts' chunks copied
// into it, and the slots filled in one pass.
func (x *recordIndex) install(parts []bulkPart) error {
	s := &x.s
	if s.g.entries != 0 || s.garbage != 0 {
		return errIndexNotEmpty
	}
	size, entries, groups, coords := 0, 0, 0, 0
	for i := range parts {
		size += parts[i].size
		entries += len(parts[i].slots)
		groups += len(parts[i].gslots)
		if parts[i].coords != nil {
			coords += len(parts[i].coords.b)
		}
	}
	if groups == 0 {
		return nil
	}
	if size > maxArena || coords > maxArena {
		return errIndexFull
	}
	s.ver.Add(1)
	defer s.ver.Add(1)
	t := &table{slots: newSlots(entries*1024/700 + 8), gslots: newSlots(groups*1024/700 + 8), arena: newArena(size), coords: newArena(coords)}
	for i := range parts {
		base := len(t.arena)
		for _, c := range parts[i].chunks {
			t.arena = append(t.arena, c...)
		}
		// The part's groups refer to its own coordinates arena, now at
		// cbase in the table's.
		if cbase := len(t.coords); cbase > 0 {
			relink := func(off int) int { return cbase + off }
			for o := base; o < len(t.arena); {
				g := groupView{b: t.arena[o:]}
				relinkCoords(g, relink)
				o += g.size()
			}
		}
		if parts[i].coords != nil {
			t.coords = append(t.coords, parts[i].coords.b...)
		}
		for _, ps := range parts[i].slots {
			insert(&s.e, t.slots, ps.h, base+ps.off)
		}
		for _, ps := range parts[i].gslots {
			insert(&s.g, t.gslots, ps.h, base+ps.off)
		}
		parts[i] = bulkPart{} // the chunks are garbage now
	}
	s.live = size
	s.coords = newCoordSet(x.seed, 0)
	s.coords.index(t.coords)
	s.tab.Store(t)
	return nil
}

// storeAll stores recs in order: a record replaces any earlier one of the
// same ref. Into an empty index, records with distinct refs are prepared
// on every core and installed at once.
func (x *recordIndex) storeAll(recs []*ImageRecord) {
	if len(recs) == 0 {
		return
	}
	if x.len() == 0 && distinctRefs(recs) {
		workers := max(1, min(runtime.GOMAXPROCS(0), len(recs)/1024))
		parts := make([]bulkPart, workers)
		var wg sync.WaitGroup
		for w := range parts {
			share := len(recs)/workers + 1 // most records have one repository
			parts[w].slots = make([]pendingSlot, 0, share)
			parts[w].gslots = make([]pendingSlot, 0, share)
			wg.Go(func() {
				for i := w; i < len(recs); i += workers {
					x.prepare(&parts[w], recs[i])
				}
			})
		}
		wg.Wait()
		if x.install(parts) == nil {
			return
		}
	}
	s := &x.s
	for _, r := range recs {
		x.put(s, r, maphash.String(x.seed, r.ImageRef), groupSize(r))
		x.compact(s)
	}
}

func distinctRefs(recs []*ImageRecord) bool {
	seen := make(map[string]struct{}, len(recs))
	for _, r := range recs {
		if _, dup := seen[r.ImageRef]; dup {
			return false
		}
		seen[r.ImageRef] = struct{}{}
	}
	return true
}
