package credtracker

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHugeAdviceCoversOnlyTheBuffer: the advice is given for whole 2 MiB
// pages inside the buffer, never for memory around it (other objects of
// the Go heap), and not at all for a buffer too small to hold one.
func TestHugeAdviceCoversOnlyTheBuffer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int
		advised bool
	}{
		{name: "too small", size: hugeMinSize - 1},
		{name: "smallest advised", size: hugeMinSize, advised: true},
		{name: "large, unaligned length", size: 9<<20 + 12345, advised: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, 0, tc.size)
			var got [][]byte
			hugeRange(b, func(r []byte) error { got = append(got, r); return nil })
			if !tc.advised {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(b[:1])))
			hi := lo + uintptr(cap(b))
			r := got[0]
			start := uintptr(unsafe.Pointer(unsafe.SliceData(r)))
			assert.Zero(t, start%hugePageSize, "advised range starts on a huge page")
			assert.Zero(t, len(r)%hugePageSize, "advised range is whole huge pages")
			assert.GreaterOrEqual(t, start, lo)
			assert.LessOrEqual(t, start+uintptr(len(r)), hi)
			assert.GreaterOrEqual(t, len(r), tc.size-2*hugePageSize, "every whole huge page inside the buffer is advised")
		})
	}
}

// TestGrowArenaNeverMovesPublishedBytes: readers may hold the old buffer,
// so growing copies into a new one and leaves the old one as it was.
func TestGrowArenaNeverMovesPublishedBytes(t *testing.T) {
	old := append(newArena(16), "published bytes!"...)
	grown := growArena(old, 100)
	require.GreaterOrEqual(t, cap(grown)-len(grown), 100)
	assert.Equal(t, "published bytes!", string(grown))
	assert.NotSame(t, unsafe.SliceData(old), unsafe.SliceData(grown))
	grown = append(grown, "more"...)
	assert.Equal(t, "published bytes!", string(old))

	roomy := newArena(64)[:10]
	assert.Same(t, unsafe.SliceData(roomy), unsafe.SliceData(growArena(roomy, 54)), "no copy while there is room")
}
