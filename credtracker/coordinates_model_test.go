package credtracker

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
)

// coordTriple is one (namespace, name, uid).
type coordTriple struct{ ns, name, uid string }

// adversarialTriples are coordinates a tenant could choose to make the
// names arena confuse one object with another: triples whose fields
// concatenate to the same bytes, fields that look like an encoded triple
// (length bytes, uvarint continuation bytes), lengths on each side of the
// uvarint's one-, two- and three-byte boundaries, and triples that share
// all but one field.
func adversarialTriples() []coordTriple {
	return []coordTriple{
		{"ab", "c", ""}, {"a", "bc", ""}, {"a", "b", "c"}, {"", "abc", ""}, {"abc", "", ""}, {"", "", "abc"}, {"", "", ""},
		{"\x01a\x01b", "\x01c", ""}, {"\x01a", "\x01b\x01c", ""}, // fields that are encoded triples' bytes
		{"\x80", "\xff\x7f", "\x00"}, {"\x80\xff", "\x7f", "\x00"},
		{"tenant-a", "regcred", "uid-1"}, {"tenant-a", "regcred", "uid-2"}, {"tenant-b", "regcred", "uid-1"},
		{"tenant-a", "regcred", "uid-1\x00"}, {"tenant-a\x00", "regcred", "uid-1"},
		{strings.Repeat("n", 127), "x", "u"}, {strings.Repeat("n", 128), "x", "u"}, // 1- and 2-byte lengths
		{strings.Repeat("n", 127) + "x", "", "u"},
		{"ns", strings.Repeat("m", 16383), "u"}, {"ns", strings.Repeat("m", 16384), "u"}, // 2- and 3-byte lengths
		{"ns", strings.Repeat("m", 16383), "uu"},
		{"ns", "name", strings.Repeat("0", 4096)}, {"ns", "name", strings.Repeat("0", 4095)},
		{"тенант", "секрет", "ü"},
	}
}

func (c coordTriple) source(kind credential.SourceKind) credential.Source {
	return credential.Source{Kind: kind, Namespace: c.ns, Name: c.name, UID: c.uid}
}

// coordsRecord is a random record for ref over repos whose secrets and
// service accounts are at coordinates from pool, repeats included (a
// secret and a service account at the same coordinates, one triple twice
// in one entry).
func coordsRecord(rng *rand.Rand, ref string, repos []string, pool []coordTriple) *ImageRecord {
	at := time.Unix(1_700_000_000+rng.Int64N(1000), 0).UTC()
	r := &ImageRecord{ImageRef: ref, Updated: at, Repositories: map[string]*RepositoryRecord{}}
	for _, repo := range repos {
		if rng.IntN(3) == 0 {
			continue
		}
		rr := &RepositoryRecord{Updated: at}
		for range rng.IntN(5) {
			c := pool[rng.IntN(len(pool))]
			var h credential.Hash
			binary.LittleEndian.PutUint64(h[:], rng.Uint64())
			rr.Secrets = append(rr.Secrets, SecretEntry{Namespace: c.ns, Name: c.name, UID: c.uid, Hash: h, Verified: at.Add(time.Duration(rng.IntN(100)))})
		}
		for range rng.IntN(4) {
			c := pool[rng.IntN(len(pool))]
			rr.ServiceAccounts = append(rr.ServiceAccounts, ServiceAccountEntry{Namespace: c.ns, Name: c.name, UID: c.uid, Verified: at.Add(time.Duration(rng.IntN(100)))})
		}
		r.Repositories[repo] = rr
	}
	return r
}

// visited returns the indexes find's callback is called with for src
// (every match: the callback never stops the walk).
func visited(find func(credential.Source, func(int) bool) bool, src credential.Source) []int {
	var got []int
	find(src, func(i int) bool { got = append(got, i); return false })
	return got
}

// checkCoords checks every record of model against x: the copy of each
// record, and for every triple of pool which secrets and service accounts
// the in-place look-ups (the rotated secret's and the service account's
// match) find.
func checkCoords(t *testing.T, x *recordIndex, model map[string]*ImageRecord, refs, repos []string, pool []coordTriple, what string) {
	t.Helper()
	for _, ref := range refs {
		r := model[ref]
		if r == nil {
			require.Nil(t, x.load(ref), "%s: deleted record %q found", what, ref)
			continue
		}
		require.Equal(t, r, x.load(ref), "%s: record %q", what, ref)
		for _, repo := range repos {
			rr := r.Repositories[repo]
			v, ok := x.loadRepository(ref, repo)
			require.Equal(t, rr != nil, ok, "%s: entry (%q, %q)", what, ref, repo)
			if !ok {
				continue
			}
			for _, c := range pool {
				var wantS, wantSA []int
				for i, s := range rr.Secrets {
					if (coordTriple{s.Namespace, s.Name, s.UID}) == c {
						wantS = append(wantS, i)
					}
				}
				for j, sa := range rr.ServiceAccounts {
					if (coordTriple{sa.Namespace, sa.Name, sa.UID}) == c {
						wantSA = append(wantSA, j)
					}
				}
				require.Equal(t, wantS, visited(v.findSecret, c.source(credential.SourceSecret)), "%s: secrets of (%q, %q) at %.40q", what, ref, repo, c)
				require.Equal(t, wantSA, visited(v.findServiceAccount, c.source(credential.SourceServiceAccount)), "%s: service accounts of (%q, %q) at %.40q", what, ref, repo, c)
			}
		}
	}
}

// liveNamesBytes is the size of a names arena that holds each triple the
// records of model list exactly once.
func liveNamesBytes(model map[string]*ImageRecord) int {
	seen := map[coordTriple]bool{}
	n := 0
	add := func(c coordTriple) {
		if !seen[c] {
			seen[c] = true
			for _, f := range []string{c.ns, c.name, c.uid} {
				n += len(binary.AppendUvarint(nil, uint64(len(f)))) + len(f)
			}
		}
	}
	for _, r := range model {
		for _, rr := range r.Repositories {
			for _, s := range rr.Secrets {
				add(coordTriple{s.Namespace, s.Name, s.UID})
			}
			for _, sa := range rr.ServiceAccounts {
				add(coordTriple{sa.Namespace, sa.Name, sa.UID})
			}
		}
	}
	return n
}

// forceRebuild rebuilds x's table as compaction would, now.
func forceRebuild(x *recordIndex) {
	s := &x.s
	t := s.tab.Load()
	x.rebuild(s, t, len(t.slots), len(t.gslots), s.live)
}

// installParts loads recs (distinct refs) into a new index through k
// start-up parts, records dealt to the parts at random.
func installParts(t *testing.T, rng *rand.Rand, recs []*ImageRecord, k int) *recordIndex {
	t.Helper()
	x := newRecordIndex()
	parts := make([]bulkPart, k)
	for _, r := range recs {
		x.prepare(&parts[rng.IntN(k)], r)
	}
	require.NoError(t, x.install(parts))
	return x
}

// TestIndexCoordinatesMatchModel drives random stores, deletes, bulk
// stores, forced rebuilds and start-up installs (over several parts) of
// records whose coordinates are adversarial, and checks after each step
// that every record's coordinates, and what the rotated secret's and the
// service account's look-ups find for every coordinates, are the model's:
// a coordinate read as another triple would admit a tenant to another's
// image. After every rebuild the names arena holds each listed triple
// exactly once.
func TestIndexCoordinatesMatchModel(t *testing.T) {
	pool := adversarialTriples()
	refs := []string{benchRef(1), benchRef(2), benchRef(3), "registry.example/raw-ref", "", strings.Repeat("r", 300)}
	repos := []string{"registry.example/a", "registry.example/ab", "registry.example/b/c"}
	steps := 120
	if raceEnabled {
		steps = 50
	}
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 2535))
			x := newRecordIndex()
			model := map[string]*ImageRecord{}
			for step := range steps {
				var what string
				switch k := rng.IntN(20); {
				case k < 9:
					r := coordsRecord(rng, refs[rng.IntN(len(refs))], repos, pool)
					x.store(r)
					model[r.ImageRef] = r.clone()
					what = "store"
				case k < 12:
					ref := refs[rng.IntN(len(refs))]
					x.delete(ref)
					delete(model, ref)
					what = "delete"
				case k < 14:
					var batch []*ImageRecord
					for range 1 + rng.IntN(4) {
						r := coordsRecord(rng, refs[rng.IntN(len(refs))], repos, pool)
						batch = append(batch, r)
						model[r.ImageRef] = r.clone()
					}
					x.storeAll(batch)
					what = "storeAll"
				case k < 17:
					forceRebuild(x)
					require.Equal(t, liveNamesBytes(model), len(x.s.coords.b), "step %d: the rebuilt names arena holds each listed triple once", step)
					what = "rebuild"
				default:
					var recs []*ImageRecord
					for _, r := range model {
						recs = append(recs, r.clone())
					}
					x = installParts(t, rng, recs, 1+rng.IntN(4))
					what = "install"
				}
				checkCoords(t, x, model, refs, repos, pool, fmt.Sprintf("step %d (%s)", step, what))
			}
			// Writes after the last step find the names already there.
			forceRebuild(x)
			checkCoords(t, x, model, refs, repos, pool, "final rebuild")
			assert.Equal(t, liveNamesBytes(model), len(x.s.coords.b))
		})
	}
}

// TestIndexInstalledNamesSurviveWritesAndRebuild: after a start-up
// install whose parts listed the same triples (so that the installed
// names arena holds them more than once), writes intern into it and a
// rebuild folds the repeats, and every record keeps its own coordinates
// throughout.
func TestIndexInstalledNamesSurviveWritesAndRebuild(t *testing.T) {
	pool := adversarialTriples()
	repos := []string{"registry.example/a", "registry.example/b"}
	rng := rand.New(rand.NewPCG(7, 7))
	model := map[string]*ImageRecord{}
	var refs []string
	var recs []*ImageRecord
	for i := range 60 {
		r := coordsRecord(rng, benchRef(i), repos, pool)
		refs = append(refs, r.ImageRef)
		recs = append(recs, r)
		model[r.ImageRef] = r.clone()
	}
	x := installParts(t, rng, recs, 4)
	require.Greater(t, len(x.s.coords.b), liveNamesBytes(model), "the parts' names arenas repeat triples")
	checkCoords(t, x, model, refs, repos, pool, "installed")
	for i := range 40 {
		r := coordsRecord(rng, refs[rng.IntN(len(refs))], repos, pool)
		x.store(r)
		model[r.ImageRef] = r.clone()
		if i%10 == 9 {
			checkCoords(t, x, model, refs, repos, pool, fmt.Sprintf("write %d", i))
		}
	}
	forceRebuild(x)
	assert.Equal(t, liveNamesBytes(model), len(x.s.coords.b), "the rebuild folds the repeats")
	checkCoords(t, x, model, refs, repos, pool, "rebuilt")
}

// TestIndexNamesArenaFullFailsClosed: a record whose coordinates do not
// fit the names arena's 32-bit offsets (maxArena, lowered here) is not
// placed even when its group fits the record arena: its previous version
// is dropped (it may list coordinates the new one no longer does) and the
// index is marked full. At start-up, parts whose names do not fit are not
// installed; the records are stored one by one, and each is then either
// whole or absent, with the index marked full.
func TestIndexNamesArenaFullFailsClosed(t *testing.T) {
	saved := maxArena
	t.Cleanup(func() { maxArena = saved })
	at := time.Unix(1_700_000_000, 0).UTC()
	withSecret := func(ref string, c coordTriple) *ImageRecord {
		return &ImageRecord{ImageRef: ref, Updated: at, Repositories: map[string]*RepositoryRecord{
			"registry.example/a": {Updated: at, Secrets: []SecretEntry{{Namespace: c.ns, Name: c.name, UID: c.uid, Verified: at}}},
		}}
	}
	tenantA := coordTriple{"tenant-a", "regcred", "uid-a"}
	long := coordTriple{"tenant-b", strings.Repeat("m", 3000), "uid-b"}

	t.Run("put", func(t *testing.T) {
		maxArena = saved
		x := newRecordIndex()
		x.store(withSecret(benchRef(1), tenantA))
		other := withSecret(benchRef(2), tenantA)
		for k := range 3 { // a names arena larger than the record arena
			c := coordTriple{"tenant-c", strings.Repeat("c", 3000), fmt.Sprint(k)}
			other.Repositories["registry.example/a"].Secrets = append(other.Repositories["registry.example/a"].Secrets, SecretEntry{Namespace: c.ns, Name: c.name, UID: c.uid, Verified: at})
		}
		x.store(other)
		require.False(t, x.full.Load())
		// Room for more groups, but not for the long coordinates.
		maxArena = len(x.s.coords.b) + 1000
		next := withSecret(benchRef(1), long)
		require.LessOrEqual(t, x.s.live+x.s.garbage+groupSize(next), maxArena, "the group alone would fit")
		x.store(next)
		assert.True(t, x.full.Load())
		assert.Nil(t, x.load(benchRef(1)), "the previous version must not stay")
		_, ok := x.loadRepository(benchRef(1), "registry.example/a")
		assert.False(t, ok)
		assert.Equal(t, other, x.load(benchRef(2)), "the other record is untouched")
		// Coordinates already there still fit: a write of them is placed.
		x.store(withSecret(benchRef(1), tenantA))
		assert.Equal(t, withSecret(benchRef(1), tenantA), x.load(benchRef(1)))
	})

	t.Run("install", func(t *testing.T) {
		var recs []*ImageRecord
		for i := range 8 {
			c := tenantA
			if i%2 == 1 {
				c = coordTriple{fmt.Sprintf("tenant-%d", i), strings.Repeat("m", 3000), fmt.Sprintf("uid-%d", i)}
			}
			recs = append(recs, withSecret(benchRef(i), c))
		}
		maxArena = 10000 // the groups fit; the long coordinates, not all
		size := 0
		for _, r := range recs {
			size += groupSize(r)
		}
		require.Less(t, size, maxArena)

		rng := rand.New(rand.NewPCG(1, 2))
		x := newRecordIndex()
		parts := make([]bulkPart, 3)
		for _, r := range recs {
			x.prepare(&parts[rng.IntN(3)], r)
		}
		require.ErrorIs(t, x.install(parts), errIndexFull)
		assert.Zero(t, x.len(), "nothing installed")

		x = newRecordIndex()
		x.storeAll(recs)
		assert.True(t, x.full.Load())
		placed := 0
		for _, r := range recs {
			if got := x.load(r.ImageRef); got != nil {
				assert.Equal(t, r, got)
				placed++
			}
			v, ok := x.loadRepository(r.ImageRef, "registry.example/a")
			if ok {
				c := r.Repositories["registry.example/a"].Secrets[0]
				assert.Equal(t, []int{0}, visited(v.findSecret, credential.Source{Kind: credential.SourceSecret, Namespace: c.Namespace, Name: c.Name, UID: c.UID}))
			}
		}
		assert.Positive(t, placed)
		assert.Less(t, placed, len(recs))
		assert.LessOrEqual(t, len(x.s.coords.b), maxArena)
	})
}
