package credtracker

import "sync/atomic"

// The index's buffers. Bytes of an arena are never changed or moved once
// published: readers may hold any buffer a table ever pointed at.

// newArena returns an empty arena with room for n bytes.
func newArena(n int) []byte { return make([]byte, 0, n) }

// growArena returns arena with room for need more bytes: arena itself if
// it has it, else a copy in a new buffer an eighth larger (amortized O(1)
// per byte, and never more than an eighth of the arena unused).
func growArena(arena []byte, need int) []byte {
	if cap(arena)-len(arena) >= need {
		return arena
	}
	return append(newArena(max(cap(arena)+cap(arena)/8, len(arena)+need, 4096)), arena...)
}

// newSlots returns n zeroed slots.
func newSlots(n int) []atomic.Uint64 { return make([]atomic.Uint64, n) }
