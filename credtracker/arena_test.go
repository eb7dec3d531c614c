package credtracker

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
