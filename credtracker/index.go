package credtracker

import (
	"hash/maphash"
	"runtime"
	"sync/atomic"
)

// recordIndex is the tracker's in-memory record set: compact (no pointer
// per record for the garbage collector to scan, each secret's coordinates
// kept once) and read without a lock.
//
// Records live in two open-addressing slot tables (linear probing) over
// one byte arena (arena.go): the entries' (image ref, repository: what a
// decision looks up) and the groups' (image ref alone, repository ""), so
// that the table every decision probes is half the size. A slot is
// one uint64: 32 bits of the keyed hash (maphash, a random seed per
// process) of (image ref, repository) as a tag, 32 bits of arena offset.
// The arena holds each record as one contiguous group (see entry.go): the
// image's header and ref, then one entry per repository with its ref and
// repository name, its secrets' hashes and verification times inline, and
// the offsets of its secrets' and service accounts' coordinates in the
// coordinates arena (coordinates.go), which holds each once. A decision is
// one slot read and one read of the entry it points at, whose key is
// compared in full.
//
// Readers take no lock. Arena bytes are never changed once written: a
// writer appends a new group, publishes the table (an immutable
// header: slots, arena, size) with an atomic pointer, then points the slots
// at it with atomic stores; the old group becomes garbage. A reader loads
// the table, then a slot; an offset past its table's arena means a newer
// table exists, and the reader loads it again. When garbage passes a
// sixteenth of the live bytes or the slots fill, the writer builds a new
// table and arena, and coordinates arena with only the coordinates still
// listed, and swaps them in: amortized O(1), independent of the record
// count.
// Coordinates no longer listed wait for that rebuild: each write leaves at
// most its own coordinates behind, and a group as garbage.
//
// Writers must be serialized by the caller (the tracker holds its write
// lock across every write, which also orders memory with disk); the index
// has no lock of its own.
type recordIndex struct {
	seed maphash.Seed
	s    indexState
	// full is set, for the life of the index, when a record could not be
	// placed (maxArena): a missing record may then be one that was lost.
	full atomic.Bool

	// slowHook, when set (by this package's tests only), runs when a
	// writer has done an O(n) step (a rebuild, an arena's copy) and not
	// yet published it.
	slowHook func()
}

// maxArena is the most bytes the arena may hold (live and garbage): a
// slot stores offset+1 in 32 bits, and all ones marks a deleted slot. A
// variable, so that tests can lower it.
var maxArena = offTombstone - 1

const (
	slotEmpty = 0
	// A deleted slot keeps probe chains intact; its offset field is all ones.
	offTombstone = 1<<32 - 1
	// maxLoad is the fraction of slots (live and deleted) in use that
	// triggers a rebuild, in 1/1024.
	maxLoad = 768
	// The arena holds at most 1/garbageShare of its live bytes as garbage
	// (replaced and deleted groups) before it is compacted, and a rebuilt
	// arena has twice that room (so that garbage triggers a compaction
	// before it makes the arena grow): the arena stays within 1/8 of the
	// live records' size, for a compaction every live/garbageShare bytes
	// written (amortized O(1) per write).
	garbageShare = 16
)

// indexState is the published table and the writers' bookkeeping.
type indexState struct {
	tab atomic.Pointer[table]
	// ver is odd while a writer changes the published slots and counts
	// changes: a reader trusts "not found" only if ver was even and did
	// not move. A rebuild or an arena's copy, which change no record and
	// take O(n), leave it even: readers go on with the table they have.
	ver atomic.Uint64
	// Writer state, the (serialized) writers' only.
	// e and g count the entries' slots and the groups'; a record has
	// one group slot, so g.entries is the number of live records.
	e, g    slotCounts
	live    int // arena bytes of live groups
	garbage int // arena bytes of replaced or deleted groups
	// coords is the coordinates arena of the published table, with its set.
	coords *coordSet
}

// slotCounts counts a slot table's live slots, and its live and deleted
// ones.
type slotCounts struct{ entries, used int }

// table is one published state of the index. Its fields never change; the
// slots' values do, atomically. The entries' slots (image ref and
// repository, what a decision looks up) and the groups' (image ref alone)
// are two tables: the one every decision probes is half the size, so more
// of it stays in the CPU's caches.
type table struct {
	slots  []atomic.Uint64 // the entries'
	gslots []atomic.Uint64 // the groups'
	arena  []byte
	coords []byte // the coordinates arena (coordinates.go) the arena's entries refer to
}

func newRecordIndex() *recordIndex {
	x := &recordIndex{seed: maphash.MakeSeed()}
	x.s.coords = newCoordSet(x.seed, 0)
	x.s.tab.Store(&table{slots: newSlots(8), gslots: newSlots(8)})
	return x
}

// pairHash mixes the ref's hash with the repository's ("" for the
// record's own slot) into the slot's hash.
func (x *recordIndex) pairHash(hr uint64, repo string) uint64 {
	return mix(hr, maphash.String(x.seed, repo))
}

func (x *recordIndex) pairHashBytes(hr uint64, repo []byte) uint64 {
	return mix(hr, maphash.Bytes(x.seed, repo))
}

func mix(hr, hrepo uint64) uint64 {
	h := hr ^ hrepo*0x9e3779b97f4a7c15
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// home is the first slot of h's probe sequence in n slots.
func home(h uint64, n int) int { return int((uint64(uint32(h)) * uint64(n)) >> 32) }

func slotValue(h uint64, off int) uint64 { return h&^(1<<32-1) | uint64(off+1) }

// probe calls match with the offset of each live slot of (ref, repo)'s
// probe sequence whose tag is right, in the newest table, until match
// returns true; it returns that table (nil if none matched). The
// repository "" probes the groups' table.
func (x *recordIndex) probe(ref, repo string, writer bool, match func(t *table, off int) bool) *table {
	s := &x.s
	hp := x.pairHash(maphash.String(x.seed, ref), repo)
	tag := hp >> 32
	for {
		ver := s.ver.Load()
		t := s.tab.Load()
		sl := t.slots
		if repo == "" {
			sl = t.gslots
		}
		n := len(sl)
		i := home(hp, n)
		retry := false
		for {
			v := sl[i].Load()
			if v == slotEmpty {
				break
			}
			if v>>32 == tag && uint32(v) != offTombstone {
				off := int(uint32(v)) - 1
				if off >= len(t.arena) {
					retry = true // written after t was published
					break
				}
				if match(t, off) {
					return t
				}
			}
			if i++; i == n {
				i = 0
			}
		}
		// A found entry is always valid (its bytes never change); a miss
		// is trusted only if no writer touched the index meanwhile: a
		// replaced record's new slot may be behind the reader and its old
		// one deleted ahead of it.
		if !retry && (writer || ver&1 == 0 && s.ver.Load() == ver) {
			return nil // (the writer itself: nothing moves)
		}
		runtime.Gosched()
	}
}

// find returns the arena offset of ref's group and its table, or -1. The
// writer says so.
func (x *recordIndex) find(ref string, writer bool) (*table, int) {
	found := -1
	t := x.probe(ref, "", writer, func(t *table, off int) bool {
		if groupIs(t.arena, off, ref) {
			found = off
			return true
		}
		return false
	})
	return t, found
}

// loadRepository returns the entry for repo in ref's record. The
// repository "" is never an entry's (it names the record's own slot).
func (x *recordIndex) loadRepository(ref, repo string) (v repoView, ok bool) {
	if repo == "" {
		return repoView{}, false
	}
	x.probe(ref, repo, false, func(t *table, off int) bool {
		v, ok = entryIs(t, off, ref, repo)
		return ok
	})
	return v, ok
}

// loadGroup returns ref's record header.
func (x *recordIndex) loadGroup(ref string) (groupView, bool) {
	t, off := x.find(ref, false)
	if off < 0 {
		return groupView{}, false
	}
	return groupView{b: t.arena[off:], coords: t.coords}, true
}

// load returns a copy of ref's record, or nil.
func (x *recordIndex) load(ref string) *ImageRecord {
	g, ok := x.loadGroup(ref)
	if !ok {
		return nil
	}
	return g.record()
}

// store replaces ref's record by r.
func (x *recordIndex) store(r *ImageRecord) {
	s := &x.s
	x.put(s, r, maphash.String(x.seed, r.ImageRef), groupSize(r))
	x.compact(s)
}

// put replaces r.ImageRef's record by r in s; s.ver is even.
// Only while it changes the published slots is the index marked as
// changing (s.ver odd): the rebuild and the arena's copy before that
// change no record, so readers, who wait while it is marked, go on
// meanwhile. The caller compacts after it (compact).
func (x *recordIndex) put(s *indexState, r *ImageRecord, hr uint64, size int) {
	nRepos := len(r.Repositories) // the entry slots r takes, and one group slot
	t := s.tab.Load()
	if s.live+s.garbage+size > maxArena || len(s.coords.b)+coordsBound(r) > maxArena {
		// A slot holds a 32-bit offset: past maxArena bytes the record
		// cannot be placed. Its previous version must not stay (it may
		// grant what the new one no longer does): the ref is left with no
		// record, and the index is marked full, so that every decision
		// that finds no record fails closed (tracker.decide).
		x.full.Store(true)
		x.marked(s, func() { x.remove(s, r.ImageRef) })
		return
	}
	if (s.e.used+nRepos)*1024 > len(t.slots)*maxLoad || (s.g.used+1)*1024 > len(t.gslots)*maxLoad {
		// Live and deleted slots fill a table: rebuild both, each twice
		// as large if live slots alone fill half of it, else as it is
		// (the deleted slots are dropped).
		x.rebuild(s, t, rebuiltSize(len(t.slots), s.e.entries+nRepos), rebuiltSize(len(t.gslots), s.g.entries+1), s.live+size)
		t = s.tab.Load()
	}
	var one [1]string
	repos := repoNames(r, &one)
	var offsBuf [4]int
	arena, offs := appendGroup(t.arena, r, repos, size, offsBuf[:0], s.coords)
	if x.slowHook != nil && cap(arena) != cap(t.arena) {
		x.slowHook()
	}
	t = &table{slots: t.slots, gslots: t.gslots, arena: arena, coords: s.coords.b}
	s.tab.Store(t) // the group is readable before any slot points at it
	s.ver.Add(1)
	defer s.ver.Add(1)
	// The old record, if any, is found while the new one's slot is placed
	// (the same probe sequence), and stays readable until the new one is.
	old := x.insertGroup(s, t, x.pairHash(hr, ""), offs[0], r.ImageRef)
	for i, repo := range repos {
		insert(&s.e, t.slots, x.pairHash(hr, repo), offs[i+1])
	}
	s.live += size
	if old >= 0 {
		x.removeAt(s, t, old, hr)
	}
}

// insertGroup points a free slot of h's probe sequence (h is the hash of
// (ref, "")) at the group at off, and returns the offset of ref's previous
// group, or -1.
func (x *recordIndex) insertGroup(s *indexState, t *table, h uint64, off int, ref string) (old int) {
	n := len(t.gslots)
	old, free := -1, -1
	for i := home(h, n); ; {
		v := t.gslots[i].Load()
		if v == slotEmpty {
			if free < 0 {
				free = i
				s.g.used++
			}
			break
		}
		if uint32(v) == offTombstone {
			if free < 0 {
				free = i
			}
		} else if o := int(uint32(v)) - 1; v>>32 == h>>32 && o != off && groupIs(t.arena, o, ref) {
			old = o
		}
		if i++; i == n {
			i = 0
		}
	}
	s.g.entries++
	t.gslots[free].Store(slotValue(h, off))
	return old
}

// rebuiltSize is the size of a rebuilt slot table of n slots that must
// hold live slots: twice live if they fill half of it, else n.
func rebuiltSize(n, live int) int {
	if live*2048 > n*maxLoad {
		return live*2 + 8
	}
	return n
}

// insert points a free slot of h's probe sequence in sl at off, and
// counts it in c.
func insert(c *slotCounts, sl []atomic.Uint64, h uint64, off int) {
	n := len(sl)
	for i := home(h, n); ; {
		v := sl[i].Load()
		if v == slotEmpty || uint32(v) == offTombstone {
			if v == slotEmpty {
				c.used++
			}
			c.entries++
			sl[i].Store(slotValue(h, off))
			return
		}
		if i++; i == n {
			i = 0
		}
	}
}

// remove deletes ref's record from s, if any.
func (x *recordIndex) remove(s *indexState, ref string) bool {
	t, off := x.find(ref, true)
	if off < 0 {
		return false
	}
	x.removeAt(s, t, off, maphash.String(x.seed, ref))
	return true
}

// removeAt deletes the group at off in t (the current table), whose ref
// hashes to hr; s.ver is odd.
func (x *recordIndex) removeAt(s *indexState, t *table, off int, hr uint64) {
	g := groupView{b: t.arena[off:]}
	tombstone(t.gslots, x.pairHash(hr, ""), off)
	for it := g.entries(); it.next(); {
		tombstone(t.slots, x.pairHashBytes(hr, it.e.repo()), off+it.pos)
	}
	size := g.size()
	s.g.entries--
	s.e.entries -= g.repos()
	s.live -= size
	s.garbage += size
}

// compact rebuilds s's table without its garbage when garbage passes
// 1/garbageShare of the live bytes; s.ver is even: a rebuild changes no
// record, so readers go on meanwhile.
func (x *recordIndex) compact(s *indexState) {
	if s.garbage > 4096 && s.garbage*garbageShare > s.live {
		t := s.tab.Load()
		x.rebuild(s, t, len(t.slots), len(t.gslots), s.live)
	}
}

// tombstone marks the slot of sl pointing at off deleted.
func tombstone(sl []atomic.Uint64, h uint64, off int) {
	n := len(sl)
	want := slotValue(h, off)
	for i := home(h, n); ; {
		v := sl[i].Load()
		if v == want {
			sl[i].Store(h&^(1<<32-1) | offTombstone)
			return
		}
		if v == slotEmpty {
			return
		}
		if i++; i == n {
			i = 0
		}
	}
}

// liveGroups calls fn with the offset of each live group of t, in slot
// order (t is the writer's).
func (t *table) liveGroups(fn func(off int)) {
	for i := range t.gslots {
		v := t.gslots[i].Load()
		if v == slotEmpty || uint32(v) == offTombstone {
			continue
		}
		off := int(uint32(v)) - 1
		if off >= len(t.arena) || t.arena[off] != kindGroup {
			continue
		}
		fn(off)
	}
}

// rebuild replaces s's table by one of n entries' and gn groups' slots
// whose arena holds only the live groups of t, with room for arenaCap
// bytes, and whose coordinates arena only the coordinates they list.
func (x *recordIndex) rebuild(s *indexState, t *table, n, gn, arenaCap int) {
	n = max(n, (s.e.entries+1)*1024/maxLoad+1, 8)
	gn = max(gn, (s.g.entries+1)*1024/maxLoad+1, 8)
	arenaCap = max(arenaCap, s.live)
	nt := &table{slots: newSlots(n), gslots: newSlots(gn), arena: newArena(arenaCap + 2*arenaCap/garbageShare)}
	coords := newCoordSet(x.seed, len(t.coords))
	relink := func(off int) int { return coords.internEncoded(tripleAt(t.coords, off)) }
	s.e, s.g, s.live, s.garbage = slotCounts{}, slotCounts{}, 0, 0
	t.liveGroups(func(off int) {
		g := groupView{b: t.arena[off:]}
		base := len(nt.arena)
		nt.arena = append(nt.arena, g.b[:g.size()]...)
		relinkCoords(groupView{b: nt.arena[base:]}, relink)
		hr := g.refHash(x.seed)
		insert(&s.g, nt.gslots, x.pairHash(hr, ""), base)
		for it := g.entries(); it.next(); {
			insert(&s.e, nt.slots, x.pairHashBytes(hr, it.e.repo()), base+it.pos)
		}
		s.live += g.size()
	})
	if x.slowHook != nil {
		x.slowHook()
	}
	// The coordinates still listed, in a buffer with the same room as the
	// arena's (the one they were gathered in had room for the old ones).
	live := len(coords.b)
	coords.b = append(newArena(live+2*live/garbageShare), coords.b...)
	nt.coords, s.coords = coords.b, coords
	s.tab.Store(nt)
}

func (x *recordIndex) delete(ref string) {
	s := &x.s
	x.marked(s, func() { x.remove(s, ref) })
	x.compact(s)
}

// marked runs fn with the index marked as changing (s.ver odd), and
// unmarks it even if fn panics: left marked, it would hold every reader
// that finds nothing forever.
func (x *recordIndex) marked(s *indexState, fn func()) {
	s.ver.Add(1)
	defer s.ver.Add(1)
	fn()
}

// len returns the number of records; the caller is the writer.
func (x *recordIndex) len() int { return x.s.g.entries }

// each calls fn for every record's header. The views
// stay valid after the call. A record replaced during the walk may be
// missed or seen twice: callers hold the tracker's write lock.
func (x *recordIndex) each(fn func(groupView)) {
	t := x.s.tab.Load()
	for j := range t.gslots {
		v := t.gslots[j].Load()
		if v == slotEmpty || uint32(v) == offTombstone {
			continue
		}
		off := int(uint32(v)) - 1
		if off < len(t.arena) && t.arena[off] == kindGroup {
			fn(groupView{b: t.arena[off:], coords: t.coords})
		}
	}
}

// all returns a copy of every record.
func (x *recordIndex) all() []*ImageRecord {
	var out []*ImageRecord
	x.each(func(g groupView) { out = append(out, g.record()) })
	return out
}
