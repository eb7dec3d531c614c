package credtracker

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIndexReadersDoNotWaitForARebuild: a rebuild (table growth,
// compaction) and an arena's copy are O(n), and change no record.
// Readers must not wait for them: a look-up that finds nothing (every
// decision for an image the node did not pull, preloaded ones included)
// is trusted only while the index is not marked as changing, so marking
// it during that work would stall those decisions for its whole length.
// Meanwhile, look-ups answer right.
func TestIndexReadersDoNotWaitForARebuild(t *testing.T) {
	const repo = "registry.example/a/app"
	x := newRecordIndex()
	stable := &ImageRecord{ImageRef: benchRef(0), Repositories: map[string]*RepositoryRecord{repo: {NodeAccessible: true}}}
	x.store(stable)
	slow, marked := 0, 0
	x.slowHook = func() {
		slow++
		if x.s.ver.Load()&1 != 0 {
			marked++
			return // a look-up would wait for this very goroutine
		}
		_, ok := x.loadRepository(benchRef(1<<30), repo)
		assert.False(t, ok, "a ref never stored")
		v, ok := x.loadRepository(stable.ImageRef, repo)
		if assert.True(t, ok, "a stored record") {
			assert.True(t, v.nodeAccessible())
		}
	}
	for i := range 3000 { // grows the table and the arena, and compacts
		x.store(&ImageRecord{ImageRef: benchRef(1 + i%500), UnknownOrigin: fmt.Sprint(i), Repositories: map[string]*RepositoryRecord{repo: {}}})
		if i%3 == 0 {
			x.delete(benchRef(1 + (i/3)%500))
		}
	}
	require.Positive(t, slow, "no rebuild or arena copy happened")
	assert.Zero(t, marked, "of %d rebuilds and arena copies, %d held readers off", slow, marked)
}
