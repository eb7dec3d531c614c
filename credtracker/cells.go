package credtracker

import (
	"encoding/binary"
	"hash/maphash"
	"sync/atomic"
	"unsafe"
)

// The decision's cells: a second, compact form of the commonest entries,
// laid out so that a uniform random decision among 100 000 records reads
// memory that stays in the CPU's caches. The arena (entry.go) keeps every
// record's key and data in full, about 180 bytes per record: 18 MB at
// 100 000 records, more than this kind of machine keeps in its last-level
// cache, so a decision that reads it pays a miss to memory (100-150 ns on
// a VM). A cell is 64 bytes, one cache line, and the cells take 72 bytes
// per entry: 7 MB at 100 000 records (docs/benchmarks.md measures both).
//
// A cell holds, for an entry (image ref, repository) whose ref is a
// sha256 digest, that lists at least one secret and is not node
// accessible: the ref's 32 bytes in full, the keyed hash (maphash, the
// index's seed) of the repository's name, the first 8 bytes of its first
// secret's credential hash (itself a keyed hash: credential.Hasher), and
// that secret's coordinates hash. A decision that finds its ref, its
// repository's hash and its first credential's hash in a cell, with no
// expiry configured, is the credential match the entry would give
// (tracker.decideByCell); anything else is decided from the arena, as
// before. What the cell trusts that the arena does not:
//
//   - the repository's name by a 64-bit keyed hash: a collision can only
//     let a pod that already proved access to this very image (the same
//     digest, verified in full) use it under another repository name, and
//     finding one means guessing the node's random seed blind, one pod at
//     a time;
//   - the credential by 64 bits of its keyed hash, which nobody without
//     the node's hashing key can compute: guessing it takes 2^63 pods on
//     average.
//
// Cells are written by the index's writer (s.mu held) and read without a
// lock, as a sequence lock: word 0 is 0 for an empty cell, odd while the
// writer fills it, and a new even number (s.cellSeq, which only grows)
// once it is filled; a reader trusts what it read only if word 0 was
// even, not 0, and the same after. An entry's cell is emptied before its
// record changes or goes (removeAt) and filled after its new version is
// published (put), so that a cell never outlives what it copies. An entry
// goes in the first empty cell of a window of cellWindow cells from its
// home; when the window is full it has no cell. Rebuilds and start-up make
// the cells anew, sized for the entries.
const (
	cellWords  = 8
	cellWindow = 4

	cellSeqAt    = 0
	cellRefAt    = 1 // 4 words
	cellRepoAt   = 5
	cellCredAt   = 6
	cellCoordsAt = 7
)

// newCells returns the cells for entries entries: an eighth more cells
// than entries (95% of entries then have a cell; a quarter more would
// give 98% for 8 more bytes per entry), and a window's worth at the end
// so that no window wraps. The writer makes them anew when the entries
// have grown by a sixteenth since (growCells).
func newCells(entries int) []atomic.Uint64 {
	m := entries + entries/8 + 1
	return make([]atomic.Uint64, (m+cellWindow-1)*cellWords)
}

// growCells makes t's cells anew for s's entries when they have grown by
// a sixteenth since the cells were made: an O(n) step every n/16 new
// entries, amortized O(1) per write. s.mu is held; readers go on with the
// cells they hold, which the writer no longer changes.
func (x *recordIndex) growCells(s *indexState) {
	if s.e.entries <= s.cellsFor+s.cellsFor/16+8 {
		return
	}
	t := s.tab.Load()
	nt := &table{slots: t.slots, gslots: t.gslots, arena: t.arena, names: t.names, cells: newCells(s.e.entries)}
	t.liveGroups(func(off int) {
		x.fillCells(s, nt, off, (groupView{b: t.arena[off:]}).refHash(x.seed), true)
	})
	if x.slowHook != nil {
		x.slowHook()
	}
	s.cellsFor = s.e.entries
	s.tab.Store(nt)
}

// cellHomes is the number of cells a window may start at.
func cellHomes(c []atomic.Uint64) int { return len(c)/cellWords - (cellWindow - 1) }

// cellable reports whether e gets a cell.
func cellable(e repoView) bool {
	return e.b[2] == refDigest && e.secrets() > 0 && !e.nodeAccessible()
}

// cellWindows returns the two windows of (ref, repo), whose hashes are hr
// and hrepo, in cells (nil if there are none): the cell of an entry is in
// one of them, so that an entry whose first window is full has a second
// chance (with one window, one entry in eight had none).
func cellWindows(cells []atomic.Uint64, hr, hrepo uint64) (a, b []atomic.Uint64) {
	n := cellHomes(cells)
	if n <= 0 {
		return nil, nil
	}
	h := mix(hr, hrepo)
	i, j := home(h, n), home(h>>32, n)
	return cells[i*cellWords : (i+cellWindow)*cellWords], cells[j*cellWords : (j+cellWindow)*cellWords]
}

// emptyCells returns the number of empty cells in the window w and the
// first of them.
func emptyCells(w []atomic.Uint64) (n int, first []atomic.Uint64) {
	for k := 0; k < len(w); k += cellWords {
		if c := w[k : k+cellWords]; c[cellSeqAt].Load() == 0 {
			if n++; n == 1 {
				first = c
			}
		}
	}
	return n, first
}

// cellIs reports whether the cell c (the writer's: no sequence check)
// copies the entry e of the repository hashing to hrepo.
func cellIs(c []atomic.Uint64, e repoView, hrepo uint64) bool {
	if c[cellSeqAt].Load() == 0 || c[cellRepoAt].Load() != hrepo {
		return false
	}
	ref := e.ref()
	for j := range 4 {
		if c[cellRefAt+j].Load() != binary.LittleEndian.Uint64(ref[8*j:]) {
			return false
		}
	}
	return true
}

// fillCell gives e, an entry of the record of hash hr, a cell in t, if it
// gets one and its window has room; s.mu is held.
func (x *recordIndex) fillCell(s *indexState, t *table, hr uint64, e repoView, private bool) {
	x.fillCellHashed(&s.cellSeq, t, hr, maphash.Bytes(x.seed, e.repo()), e, private)
}

// fillCellHashed is fillCell for an entry whose repository hashes to
// hrepo. In a table no reader can see yet (private: a rebuild's, start-up's)
// it writes the words plainly, which lets their cache misses overlap:
// publishing the table (an atomic store) orders them before any reader's.
func (x *recordIndex) fillCellHashed(seq *uint64, t *table, hr, hrepo uint64, e repoView, private bool) {
	if !cellable(e) {
		return
	}
	// The emptier of the two windows: the windows fill evenly.
	wa, wb := cellWindows(t.cells, hr, hrepo)
	na, c := emptyCells(wa)
	if nb, cb := emptyCells(wb); nb > na {
		c = cb
	}
	if c == nil {
		return // no room: the entry is decided from the arena
	}
	ref := e.ref()
	words := [cellWords]uint64{
		cellRefAt:     binary.LittleEndian.Uint64(ref),
		cellRefAt + 1: binary.LittleEndian.Uint64(ref[8:]),
		cellRefAt + 2: binary.LittleEndian.Uint64(ref[16:]),
		cellRefAt + 3: binary.LittleEndian.Uint64(ref[24:]),
		cellRepoAt:    hrepo,
		cellCredAt:    binary.LittleEndian.Uint64(e.b[e.sec:]),
		cellCoordsAt:  uint64(e.coordsHash(0)),
	}
	if private {
		*seq += 2
		words[cellSeqAt] = *seq
		*(*[cellWords]uint64)(unsafe.Pointer(&c[0])) = words
		return
	}
	*seq++ // odd: being filled
	c[cellSeqAt].Store(*seq)
	for j := cellSeqAt + 1; j < cellWords; j++ {
		c[j].Store(words[j])
	}
	*seq++
	c[cellSeqAt].Store(*seq)
}

// clearCell empties e's cell in t, if it has one; s.mu is held.
func (x *recordIndex) clearCell(t *table, hr uint64, e repoView) {
	if !cellable(e) {
		return
	}
	hrepo := maphash.Bytes(x.seed, e.repo())
	wa, wb := cellWindows(t.cells, hr, hrepo)
	for _, w := range [2][]atomic.Uint64{wa, wb} {
		for k := 0; k < len(w); k += cellWords {
			if c := w[k : k+cellWords]; cellIs(c, e, hrepo) {
				c[cellSeqAt].Store(0)
			}
		}
	}
}

// fillCells gives the entries of the group at off in t their cells.
func (x *recordIndex) fillCells(s *indexState, t *table, off int, hr uint64, private bool) {
	for it := (groupView{b: t.arena[off:]}).entries(); it.next(); {
		x.fillCell(s, t, hr, it.e, private)
	}
}

// cellFind returns the cell of the published table that copies the entry
// (ref, repo), whose hashes are hr and hrepo, with the sequence number it
// had when read (nil if there is none). The caller reads the cell's
// credential and coordinates, then trusts them only if cellStill.
func (x *recordIndex) cellFind(hr, hrepo uint64, ref string) (c []atomic.Uint64, seq uint64) {
	if len(ref) != digestRefLen || ref[:len(digestPrefix)] != digestPrefix {
		return nil, 0
	}
	wa, wb := cellWindows(x.s.tab.Load().cells, hr, hrepo)
	for _, w := range [2][]atomic.Uint64{wa, wb} {
		for k := 0; k < len(w); k += cellWords {
			c := w[k : k+cellWords]
			seq := c[cellSeqAt].Load()
			if seq == 0 || seq&1 != 0 || c[cellRepoAt].Load() != hrepo {
				continue
			}
			var stored [32]byte
			for j := range 4 {
				binary.LittleEndian.PutUint64(stored[8*j:], c[cellRefAt+j].Load())
			}
			if refIs(refDigest, stored[:], ref) {
				return c, seq
			}
		}
	}
	return nil, 0
}

// cellStill reports whether the cell c still holds what it held at seq.
func cellStill(c []atomic.Uint64, seq uint64) bool { return c[cellSeqAt].Load() == seq }
