package credtracker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
)

// indexBytes is the memory the index holds: its arenas' and its slots'
// buffers, whole, and the coordinates' set.
func indexBytes(x *recordIndex) int {
	t := x.s.tab.Load()
	return cap(t.arena) + cap(t.coords) + 8*len(t.slots) + 8*len(t.gslots) + 4*len(x.s.coords.slots)
}

// TestIndexMemoryStaysBounded: records replaced, added and deleted for a
// long time (each write leaves its old group as garbage, and the arena
// grows) keep the index within an eighth of the size it has after
// start-up for the same records: growth is in steps of an eighth, not
// doublings, and garbage is compacted before it makes the arena grow. The
// same holds for the names arena when every write names a new secret
// (coordinates churn): coordinates no longer listed go with the garbage.
func TestIndexMemoryStaysBounded(t *testing.T) {
	for _, churn := range []bool{false, true} {
		t.Run(fmt.Sprintf("coordinatesChurn=%v", churn), func(t *testing.T) { testIndexMemoryStaysBounded(t, churn) })
	}
}

func testIndexMemoryStaysBounded(t *testing.T, churn bool) {
	n, rounds := scaled(4_000, 20_000), scaled(3, 10) // rounds of n writes
	if raceEnabled {
		n = scaled(1_000, 20_000)
	}
	now := time.Unix(1_700_000_000, 0)
	rec := func(i, version int) *ImageRecord {
		var h credential.Hash
		h[0], h[1], h[2] = byte(i), byte(i>>8), byte(version)
		src := credential.Source{Kind: credential.SourceSecret, Namespace: fmt.Sprintf("tenant-%d", i%500), Name: "regcred", UID: fmt.Sprintf("%08d-3d4a-4c5b-9e7f-0a1b2c3d4e5f", i%500)}
		if churn {
			src.UID = fmt.Sprintf("%08d-%08d-4c5b-9e7f-0a1b2c3d4e5f", i, version)
		}
		return (*ImageRecord)(nil).withPull(benchRef(i), fmt.Sprintf("registry.example/tenant-%d/app-%d", i%500, i), src, h, now.Add(time.Duration(version)*time.Second), DefaultMaxEntries, 0)
	}
	recs := make([]*ImageRecord, n)
	for i := range recs {
		recs[i] = rec(i, 0)
	}
	x := newRecordIndex()
	x.storeAll(recs)
	loaded := indexBytes(x)
	require.Equal(t, n, x.len())

	peak := loaded
	for k := range rounds * n {
		switch i := (k * 7919) % n; k % 10 {
		case 9: // delete one, add it back
			x.delete(recs[i].ImageRef)
			x.store(rec(i, k))
		default: // a new verification time: the record is replaced
			x.store(rec(i, k))
		}
		peak = max(peak, indexBytes(x))
	}
	require.Equal(t, n, x.len())
	for i, r := range recs[:100] { // each record's coordinates read back
		got := x.load(r.ImageRef)
		require.NotNil(t, got)
		for _, rr := range got.Repositories {
			require.Len(t, rr.Secrets, 1)
			assert.Equal(t, fmt.Sprintf("tenant-%d", i%500), rr.Secrets[0].Namespace)
			assert.Equal(t, "regcred", rr.Secrets[0].Name)
			assert.Equal(t, churn, !strings.HasPrefix(rr.Secrets[0].UID, fmt.Sprintf("%08d-3d4a-", i%500)), rr.Secrets[0].UID)
		}
	}
	assert.LessOrEqual(t, peak, loaded+loaded/8, "the index grew from %d to %d bytes for the same %d records", loaded, peak, n)
	t.Logf("after start-up: %d bytes (%d per record); peak over %d writes: %d (%d per record)", loaded, loaded/n, rounds*n, peak, peak/n)
}
