package credtracker

import (
	"fmt"
	"hash/maphash"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
)

// TestNameSetKeepsEachTripleOnce: a triple is written once and found
// again at the same offset, through the set's growth; triples that differ
// only in where their fields split are different triples.
func TestNameSetKeepsEachTripleOnce(t *testing.T) {
	type triple struct{ ns, name, uid string }
	distinct := []triple{
		{"ab", "c", ""}, {"a", "bc", ""}, {"a", "b", "c"}, {"", "", ""}, {"", "abc", ""},
		{"ns", "regcred", "00000001-3d4a"}, {"ns", "regcred", "00000002-3d4a"},
	}
	for i := range 2000 { // enough to make the set grow many times
		distinct = append(distinct, triple{fmt.Sprintf("tenant-%d", i), "regcred", fmt.Sprintf("uid-%d", i)})
	}
	s := newCoordSet(maphash.MakeSeed(), 0)
	offs := make([]int, len(distinct))
	for i, tr := range distinct {
		offs[i] = s.intern(tr.ns, tr.name, tr.uid)
	}
	size := len(s.b)
	seen := map[int]bool{}
	for i, tr := range distinct {
		assert.False(t, seen[offs[i]], "two triples at offset %d", offs[i])
		seen[offs[i]] = true
		assert.Equal(t, offs[i], s.intern(tr.ns, tr.name, tr.uid), "%v written twice", tr)
		ns, name, uid := coordsAt(s.b, offs[i])
		assert.Equal(t, tr, triple{string(ns), string(name), string(uid)})
	}
	assert.Equal(t, size, len(s.b), "interning known triples wrote to the arena")
	assert.Equal(t, len(distinct), s.n)

	// An arena gathered from several sets (start-up's parts) may hold a
	// triple twice: indexing it keeps the first copy, and both stay valid.
	again := newCoordSet(s.seed, 0)
	again.intern("a", "b", "c")
	again.intern("ns", "other", "x")
	joined := append(append([]byte(nil), s.b...), again.b...)
	x := newCoordSet(s.seed, 0)
	x.index(joined)
	assert.Equal(t, len(distinct)+1, x.n)
	assert.Equal(t, offs[2], x.intern("a", "b", "c"), "the first copy of a repeated triple is the set's")
	assert.Equal(t, len(s.b)+len(tripleAt(again.b, 0)), x.intern("ns", "other", "x"))
	assert.Equal(t, len(joined), len(x.b), "indexing wrote nothing")
}

// TestIndexBulkPartsReferToTheirOwnNames: at start-up each worker keeps
// its own names; installed together, every record's coordinates are its
// own, whichever part encoded it.
func TestIndexBulkPartsReferToTheirOwnNames(t *testing.T) {
	at := time.Unix(1_700_000_000, 0).UTC()
	var recs []*ImageRecord
	for i := range 300 {
		recs = append(recs, &ImageRecord{ImageRef: benchRef(i), Updated: at, Repositories: map[string]*RepositoryRecord{
			fmt.Sprintf("registry.example/t%d/app", i): {Updated: at,
				Secrets:         []SecretEntry{{Namespace: fmt.Sprintf("ns-%d", i%7), Name: fmt.Sprintf("s-%d", i%3), UID: fmt.Sprintf("u-%d", i), Hash: credential.Hash{byte(i), 1}, Verified: at}},
				ServiceAccounts: []ServiceAccountEntry{{Namespace: fmt.Sprintf("ns-%d", i%5), Name: "sa", UID: fmt.Sprintf("v-%d", i%11), Verified: at}}},
		}})
	}
	x := newRecordIndex()
	parts := make([]bulkPart, 3)
	for i, r := range recs {
		x.prepare(&parts[i%3], r)
	}
	require.NoError(t, x.install(parts))
	for _, r := range recs {
		assert.Equal(t, r, x.load(r.ImageRef))
	}
	// A write after start-up finds the installed names.
	before := len(x.s.coords.b)
	next := recs[5].clone()
	next.Updated = at.Add(time.Second)
	x.store(next)
	assert.Equal(t, before, len(x.s.coords.b), "a record listing known coordinates wrote them again")
	assert.Equal(t, next, x.load(next.ImageRef))
}

// FuzzNameSetTriples: two triples interned into a names arena (after
// others, so that offsets and lengths vary) read back exactly; they share
// an offset if and only if they are the same triple, also in a set
// indexed from the arena (start-up's install) and in one rebuilt from it.
func FuzzNameSetTriples(f *testing.F) {
	f.Add("ab", "c", "", "a", "bc", "", uint8(0))
	f.Add("ns", "regcred", "uid", "ns", "regcred", "uid", uint8(3))
	f.Add("\x01a", "\x01b", "\x80", "\x01a\x01b", "", "\x80", uint8(200))
	f.Fuzz(func(t *testing.T, ns1, name1, uid1, ns2, name2, uid2 string, before uint8) {
		s := newCoordSet(maphash.MakeSeed(), 0)
		for i := range int(before) {
			s.intern(fmt.Sprint(i), strings.Repeat("x", i), "")
		}
		o1 := s.intern(ns1, name1, uid1)
		o2 := s.intern(ns2, name2, uid2)
		same := ns1 == ns2 && name1 == name2 && uid1 == uid2
		require.Equal(t, same, o1 == o2)
		for _, c := range []struct {
			off           int
			ns, name, uid string
		}{{o1, ns1, name1, uid1}, {o2, ns2, name2, uid2}} {
			ns, name, uid := coordsAt(s.b, c.off)
			require.Equal(t, []string{c.ns, c.name, c.uid}, []string{string(ns), string(name), string(uid)})
		}
		indexed := newCoordSet(s.seed, 0)
		indexed.index(append([]byte(nil), s.b...))
		require.Equal(t, o1, indexed.intern(ns1, name1, uid1))
		require.Equal(t, o2, indexed.intern(ns2, name2, uid2))
		rebuilt := newCoordSet(s.seed, 0)
		r2 := rebuilt.internEncoded(tripleAt(s.b, o2))
		r1 := rebuilt.internEncoded(tripleAt(s.b, o1))
		require.Equal(t, same, r1 == r2)
		ns, name, uid := coordsAt(rebuilt.b, r1)
		require.Equal(t, []string{ns1, name1, uid1}, []string{string(ns), string(name), string(uid)})
	})
}
