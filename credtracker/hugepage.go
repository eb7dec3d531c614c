package credtracker

import (
	"sync/atomic"
	"unsafe"
)

// The index's arena and slot tables are read at random: a decision among
// 100 000 records touches one slot and one record that are, almost
// always, on pages the CPU's TLB does not hold. With 4 KiB pages each of
// those misses adds a page walk to the cache miss; with 2 MiB pages the
// whole index is a few dozen TLB entries. So the large buffers of the
// index ask the kernel for transparent huge pages (madvise(MADV_HUGEPAGE),
// honoured when /sys/kernel/mm/transparent_hugepage/enabled is "always" or
// "madvise"; with "never" they keep 4 KiB pages and only lose speed).
//
// The buffers stay ordinary Go heap memory: the GC frees them, and the
// heap figures count them. Only the 2 MiB-aligned interior of a buffer is
// advised, so the advice covers no memory the buffer does not own.

const hugePageSize = 2 << 20

// hugeMinSize is the smallest buffer worth advising: smaller ones fit the
// TLB's reach with small pages.
const hugeMinSize = 2 * hugePageSize

// adviseHuge asks for transparent huge pages on the 2 MiB-aligned interior
// of b, if b is large enough. Failures are ignored: the advice is only
// about speed.
func adviseHuge(b []byte) { hugeRange(b, madviseHuge) }

// collapseHuge turns the pages of b's aligned interior that are already in
// use into huge pages now (madvise(MADV_COLLAPSE), Linux 6.1 and later):
// the Go heap may hand out memory it has used before, already backed by
// small pages, which the advice alone would leave as they are.
func collapseHuge(b []byte) { hugeRange(b, madviseCollapse) }

func hugeRange(b []byte, advise func([]byte) error) {
	if cap(b) < hugeMinSize {
		return
	}
	b = b[:cap(b)]
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p + hugePageSize - 1) &^ (hugePageSize - 1)
	hi := (p + uintptr(len(b))) &^ (hugePageSize - 1)
	if hi <= lo {
		return
	}
	_ = advise(b[lo-p : hi-p])
}

// newArena returns an empty arena with room for n bytes.
func newArena(n int) []byte {
	b := make([]byte, 0, n)
	adviseHuge(b)
	return b
}

// growArena returns arena with room for need more bytes: arena itself if
// it has it, else a copy in a new buffer an eighth larger (amortized O(1)
// per byte, and never more than an eighth of the arena unused). Bytes already published are never moved in place: readers
// holding the old buffer keep reading it.
func growArena(arena []byte, need int) []byte {
	if cap(arena)-len(arena) >= need {
		return arena
	}
	b := append(newArena(max(cap(arena)+cap(arena)/8, len(arena)+need, 4096)), arena...)
	collapseHuge(b)
	return b
}

// newSlots returns n zeroed slots, advised like an arena when large.
func newSlots(n int) []atomic.Uint64 {
	s := make([]atomic.Uint64, n)
	if n*8 >= hugeMinSize {
		adviseHuge(slotBytes(s))
	}
	return s
}

func slotBytes(s []atomic.Uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*8)
}

// collapse makes t's buffers huge pages now; see collapseHuge.
func (t *table) collapse() {
	collapseHuge(t.arena)
	collapseHuge(slotBytes(t.slots))
}
