package credtracker

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pullguard/pullguard/pkg/credential"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cellsFilled counts the filled cells of the published table.
func cellsFilled(x *recordIndex) int {
	cells := x.s.tab.Load().cells
	n := 0
	for k := 0; k < len(cells); k += cellWords {
		if cells[k+cellSeqAt].Load() != 0 {
			n++
		}
	}
	return n
}

// TestCellsCoverMostEntries: two windows of four cells, an eighth more
// cells than entries, give most entries a cell (95-97%), after start-up
// and after the records were written one by one (growCells makes the
// cells anew as the entries grow). The entries without one are decided
// from the arena, correctly but slower (docs/benchmarks.md).
func TestCellsCoverMostEntries(t *testing.T) {
	for _, n := range []int{1_000, 50_000} {
		h := testHasher(t)
		now := time.Unix(1_700_000_000, 0)
		recs := make([]*ImageRecord, n)
		for i := range recs {
			c := benchCred(h, i)
			repo, err := RepositoryName(benchImage(i))
			require.NoError(t, err)
			recs[i] = (*ImageRecord)(nil).withPull(benchRef(i), repo, c.Source, c.Hash, now, DefaultMaxEntries, 0)
		}
		for _, bulk := range []bool{true, false} {
			t.Run(fmt.Sprintf("records=%d/startup=%v", n, bulk), func(t *testing.T) {
				x := newRecordIndex()
				if bulk {
					x.storeAll(recs)
				} else {
					for _, r := range recs {
						x.store(r)
					}
				}
				require.Equal(t, n, x.len())
				filled := cellsFilled(x)
				t.Logf("%d of %d entries have a cell (%.1f%%), %d cells", filled, n, 100*float64(filled)/float64(n), len(x.s.tab.Load().cells)/cellWords)
				assert.GreaterOrEqual(t, filled*100, n*90, "too few cells")
				assert.LessOrEqual(t, filled, n)
			})
		}
	}
}

func testHasher(t *testing.T) *credential.Hasher {
	h, _, err := credential.LoadOrCreateHasher(filepath.Join(t.TempDir(), HashKeyFile))
	require.NoError(t, err)
	return h
}
