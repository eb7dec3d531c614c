package credtracker

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The index keeps two slot tables: the entries' (image ref, repository)
// and the groups' (image ref alone). A slot in the wrong table, a
// tombstone left in the wrong one, a rebuild that drops one table's slots
// or counts that drift (a table that fills up: readers probe forever)
// would make a decision miss a record, and a miss reads as "preloaded".
// These tests check both tables slot by slot against the arena after
// every step.

// checkSplitTables recounts both slot tables of x's published table and
// checks them against the writer's counts and the arena: every live
// group has exactly one group slot, reachable from its home slot, and
// each of its entries exactly one entry slot, reachable likewise; no slot
// points at a dead group or at the other kind; each table keeps an empty
// slot within its load factor.
func checkSplitTables(t *testing.T, x *recordIndex, what string) {
	t.Helper()
	s := &x.s
	tab := s.tab.Load()

	// reachable reports whether slot i of sl is reached by h's probe
	// sequence before an empty slot.
	reachable := func(sl []atomic.Uint64, h uint64, i int) bool {
		n := len(sl)
		for j := home(h, n); ; {
			if j == i {
				return true
			}
			if sl[j].Load() == slotEmpty {
				return false
			}
			if j++; j == n {
				j = 0
			}
		}
	}
	count := func(sl []atomic.Uint64) (c slotCounts) {
		for i := range sl {
			if v := sl[i].Load(); v != slotEmpty {
				c.used++
				if uint32(v) != offTombstone {
					c.entries++
				}
			}
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		sl    []atomic.Uint64
		count slotCounts
	}{
		{"entries' table", tab.slots, s.e},
		{"groups' table", tab.gslots, s.g},
	} {
		got := count(tc.sl)
		require.Equal(t, got, tc.count, "%s: %s: the writer's counts (live, used) are the table's", what, tc.name)
		require.Less(t, got.used, len(tc.sl), "%s: %s: an empty slot ends every probe", what, tc.name)
		require.LessOrEqual(t, got.used*1024, len(tc.sl)*maxLoad, "%s: %s: within the load factor", what, tc.name)
	}

	// The groups' table: groups only, each reachable, each ref once.
	entryOwner := map[int]int{} // entry offset -> its live group's offset
	refs := map[string]bool{}
	live := 0
	for i := range tab.gslots {
		v := tab.gslots[i].Load()
		if v == slotEmpty || uint32(v) == offTombstone {
			continue
		}
		off := int(uint32(v)) - 1
		require.Less(t, off, len(tab.arena), "%s: group slot %d past the arena", what, i)
		require.Equal(t, byte(kindGroup), tab.arena[off], "%s: group slot %d points at an entry", what, i)
		g := groupView{b: tab.arena[off:], coords: tab.coords}
		ref := g.refString()
		require.False(t, refs[ref], "%s: two live groups for %q", what, ref)
		refs[ref] = true
		hr := g.refHash(x.seed)
		h := x.pairHash(hr, "")
		require.Equal(t, h>>32, v>>32, "%s: group slot %d's tag", what, i)
		require.True(t, reachable(tab.gslots, h, i), "%s: group %q unreachable from its home slot", what, ref)
		live += g.size()
		for it := g.entries(); it.next(); {
			entryOwner[off+it.pos] = off
		}
	}
	require.Len(t, refs, s.g.entries, "%s: record count", what)
	require.Equal(t, live, s.live, "%s: live bytes", what)

	// The entries' table: entries of live groups only, each once, each
	// reachable.
	seen := map[int]bool{}
	for i := range tab.slots {
		v := tab.slots[i].Load()
		if v == slotEmpty || uint32(v) == offTombstone {
			continue
		}
		off := int(uint32(v)) - 1
		require.Less(t, off, len(tab.arena), "%s: entry slot %d past the arena", what, i)
		require.Equal(t, byte(kindEntry), tab.arena[off], "%s: entry slot %d points at a group", what, i)
		gOff, ok := entryOwner[off]
		require.True(t, ok, "%s: entry slot %d points at an entry of a dead group", what, i)
		require.False(t, seen[off], "%s: two slots for the entry at %d", what, off)
		seen[off] = true
		g := groupView{b: tab.arena[gOff:]}
		h := x.pairHashBytes(g.refHash(x.seed), entryAt(tab.arena[off:], nil).repo())
		require.Equal(t, h>>32, v>>32, "%s: entry slot %d's tag", what, i)
		require.True(t, reachable(tab.slots, h, i), "%s: entry slot %d unreachable from its home slot", what, i)
	}
	require.Len(t, seen, len(entryOwner), "%s: every live entry has a slot", what)
}

// manyRepos returns n repository names.
func manyRepos(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("registry.example/team-%d/app", i)
	}
	return out
}

// TestIndexSplitTablesStayConsistent drives random stores, replaces,
// deletes, bulk stores, start-up installs and forced rebuilds over record
// shapes that load one table much more than the other, and checks both
// tables slot by slot (checkSplitTables) and every look-up against a
// model (checkIndex) after each step.
func TestIndexSplitTablesStayConsistent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		refs  int
		repos int // repository names to draw from
		rec   func(rng *rand.Rand, ref string, repos []string) *ImageRecord
	}{
		{name: "mixed", refs: 60, repos: 6, rec: randomRecord},
		{name: "many repositories per record", refs: 8, repos: 40, rec: func(rng *rand.Rand, ref string, repos []string) *ImageRecord {
			r := &ImageRecord{ImageRef: ref, Repositories: map[string]*RepositoryRecord{}}
			for _, repo := range repos[:rng.IntN(len(repos)+1)] {
				r.Repositories[repo] = &RepositoryRecord{NodeAccessible: true}
			}
			return r
		}},
		{name: "no repositories", refs: 200, repos: 2, rec: func(rng *rand.Rand, ref string, repos []string) *ImageRecord {
			if rng.IntN(10) == 0 {
				return randomRecord(rng, ref, repos) // a few entries, so that a look-up has something to probe
			}
			return &ImageRecord{ImageRef: ref, Repositories: map[string]*RepositoryRecord{}}
		}},
	} {
		for seed := range uint64(scaled(1, 3)) {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 1313))
				refs := make([]string, tc.refs)
				for i := range refs {
					refs[i] = benchRef(i)
				}
				repos := manyRepos(tc.repos)
				x := newRecordIndex()
				model := map[string]*ImageRecord{}
				for step := range scaled(120, 300) {
					var what string
					switch op := rng.IntN(20); {
					case op < 11:
						r := tc.rec(rng, refs[rng.IntN(len(refs))], repos)
						x.store(r)
						model[r.ImageRef] = r
						what = "store"
					case op < 16:
						ref := refs[rng.IntN(len(refs))]
						x.delete(ref)
						delete(model, ref)
						what = "delete"
					case op < 18:
						var bulk []*ImageRecord
						for range rng.IntN(8) {
							r := tc.rec(rng, refs[rng.IntN(len(refs))], repos)
							bulk = append(bulk, r)
							model[r.ImageRef] = r
						}
						x.storeAll(bulk)
						what = "storeAll"
					case op < 19:
						forceRebuild(x)
						what = "rebuild"
					default:
						// Restart: the live records installed into a new
						// index, then written on.
						var recs []*ImageRecord
						for _, r := range model {
							recs = append(recs, r)
						}
						x = installParts(t, rng, recs, 1+rng.IntN(3))
						what = "install"
					}
					label := fmt.Sprintf("step %d (%s)", step, what)
					checkSplitTables(t, x, label)
					checkIndex(t, step, x, model, refs, repos)
				}
			})
		}
	}
}

// TestIndexOneTableChurn churns one table only, so that it fills with
// deleted slots while the other does not: the full one must be rebuilt
// (readers would probe forever in a table with no empty slot), without
// growing, and without losing the other's slots; the quiet table must not
// grow either.
func TestIndexOneTableChurn(t *testing.T) {
	const steady = 20 // records that stay throughout
	for _, tc := range []struct {
		name string
		// churn returns the record of churn round i.
		churn func(i int) *ImageRecord
		// del says whether round i's record is deleted after it is
		// stored (a fresh ref each round), or replaced by the next round's.
		del bool
	}{
		{
			// Each round replaces one record with 64 new entries: the
			// entries' table fills with deleted slots, the groups' table
			// barely moves.
			name: "entries' table: replaces of a many-repository record",
			churn: func(i int) *ImageRecord {
				r := &ImageRecord{ImageRef: "churn", Repositories: map[string]*RepositoryRecord{}}
				for _, repo := range manyRepos(64) {
					r.Repositories[repo] = &RepositoryRecord{Secrets: []SecretEntry{{Namespace: "ns", Name: "s", UID: fmt.Sprint(i)}}}
				}
				return r
			},
		},
		{
			// Each round adds and deletes a record with no repository:
			// the groups' table fills with deleted slots, the entries'
			// table is never written.
			name: "groups' table: records without repositories come and go",
			churn: func(i int) *ImageRecord {
				return &ImageRecord{ImageRef: fmt.Sprintf("raw-%d", i), Repositories: map[string]*RepositoryRecord{}}
			},
			del: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newRecordIndex()
			model := map[string]*ImageRecord{}
			refs := []string{"churn"}
			repos := manyRepos(2)
			for i := range steady {
				r := randomRecord(rand.New(rand.NewPCG(uint64(i), 5)), benchRef(i), repos)
				x.store(r)
				model[r.ImageRef] = r
				refs = append(refs, r.ImageRef)
			}
			checkSplitTables(t, x, "steady records")
			tab := x.s.tab.Load()
			maxSlots, maxGSlots := 4*len(tab.slots)+256, 4*len(tab.gslots)+64
			rebuilds := 0
			for i := range scaled(1000, 3000) {
				r := tc.churn(i)
				x.store(r)
				model[r.ImageRef] = r
				if tc.del {
					x.delete(r.ImageRef)
					delete(model, r.ImageRef)
				}
				if nt := x.s.tab.Load(); &nt.slots[0] != &tab.slots[0] || &nt.gslots[0] != &tab.gslots[0] {
					rebuilds++
					tab = nt
				}
				if i%97 == 0 {
					checkSplitTables(t, x, fmt.Sprintf("round %d", i))
				}
				require.LessOrEqual(t, len(tab.slots), maxSlots, "round %d: the entries' table grows without live entries", i)
				require.LessOrEqual(t, len(tab.gslots), maxGSlots, "round %d: the groups' table grows without live groups", i)
			}
			assert.Positive(t, rebuilds, "the churned table was rebuilt")
			checkSplitTables(t, x, "end")
			checkIndex(t, 0, x, model, refs, repos)
		})
	}
}

// TestIndexTableOfOneKindFull: a table whose live and deleted slots reach
// the load factor on the next write is rebuilt by that write, whichever
// of the two it is, so that neither ever runs out of empty slots; both
// tables are set up at the edge, one at a time.
func TestIndexTableOfOneKindFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  func(i int) *ImageRecord
	}{
		{"one repository each", func(i int) *ImageRecord {
			return &ImageRecord{ImageRef: benchRef(i), Repositories: map[string]*RepositoryRecord{"registry.example/a": {NodeAccessible: true}}}
		}},
		{"no repository", func(i int) *ImageRecord { return &ImageRecord{ImageRef: benchRef(i)} }},
		{"a record larger than the table", func(i int) *ImageRecord {
			r := &ImageRecord{ImageRef: benchRef(i), Repositories: map[string]*RepositoryRecord{}}
			for _, repo := range manyRepos(3 + 17*(i%3)) {
				r.Repositories[repo] = &RepositoryRecord{NodeAccessible: true}
			}
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newRecordIndex()
			for i := range scaled(100, 400) {
				x.store(tc.rec(i))
				checkSplitTables(t, x, fmt.Sprintf("store %d", i))
				if i%3 == 0 {
					x.delete(benchRef(i / 2))
					checkSplitTables(t, x, fmt.Sprintf("delete %d", i/2))
				}
			}
		})
	}
}

// TestIndexReadersNeverMissUnderOneTableChurn: lock-free readers look up
// records that stay (their entry and their group) while a writer churns
// one table only, rebuilding it again and again: a reader must never miss
// either, since a missing entry or group makes the image look preloaded.
func TestIndexReadersNeverMissUnderOneTableChurn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(x *recordIndex, i int)
	}{
		{"entries' table", func(x *recordIndex, i int) {
			r := &ImageRecord{ImageRef: "churn", Repositories: map[string]*RepositoryRecord{}}
			for _, repo := range manyRepos(1 + i%48) {
				r.Repositories[repo] = &RepositoryRecord{NodeAccessible: true}
			}
			x.store(r)
		}},
		{"groups' table", func(x *recordIndex, i int) {
			ref := fmt.Sprintf("raw-%d", i)
			x.store(&ImageRecord{ImageRef: ref})
			if i%4 != 3 { // a few stay, so that the table grows too
				x.delete(ref)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newRecordIndex()
			repo := "registry.example/a/app"
			stable := make([]string, 32)
			for i := range stable {
				stable[i] = benchRef(i)
				x.store(&ImageRecord{ImageRef: stable[i], Repositories: map[string]*RepositoryRecord{repo: {NodeAccessible: true}}})
			}
			done := make(chan struct{})
			errs := make(chan string, 2)
			var reads atomic.Int64
			for range 2 {
				go func() {
					for {
						select {
						case <-done:
							errs <- ""
							return
						default:
						}
						for _, ref := range stable {
							if _, ok := x.loadRepository(ref, repo); !ok {
								errs <- "entry of " + ref + " missed"
								return
							}
							if _, ok := x.loadGroup(ref); !ok {
								errs <- "group of " + ref + " missed"
								return
							}
						}
						reads.Add(1)
					}
				}()
			}
			start := x.s.tab.Load()
			// Until the readers have overlapped the writes a few times.
			for i := 0; i < scaled(1000, 4000) || reads.Load() < 8; i++ {
				tc.write(x, i)
			}
			close(done)
			for range 2 {
				assert.Empty(t, <-errs)
			}
			assert.NotSame(t, start, x.s.tab.Load())
			checkSplitTables(t, x, "end")
		})
	}
}

// TestIndexInstallAfterEmptiedByDeletes: an index emptied by deletes (and
// compacted) takes the start-up install path again; both of the new
// tables, and the counts, are the installed records'.
func TestIndexInstallAfterEmptiedByDeletes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 13))
	repos := manyRepos(4)
	x := newRecordIndex()
	for i := range 300 {
		x.store(randomRecord(rng, benchRef(i), repos))
	}
	for i := range 300 {
		x.delete(benchRef(i))
	}
	forceRebuild(x) // whatever garbage the deletes left below the compaction threshold
	checkSplitTables(t, x, "emptied")
	require.Zero(t, x.len())
	model := map[string]*ImageRecord{}
	var recs []*ImageRecord
	var refs []string
	for i := range 2000 {
		r := randomRecord(rng, benchRef(10_000+i), repos)
		if i%5 == 0 {
			r = &ImageRecord{ImageRef: r.ImageRef, Repositories: map[string]*RepositoryRecord{}}
		}
		recs = append(recs, r)
		refs = append(refs, r.ImageRef)
		model[r.ImageRef] = r
	}
	before := x.s.tab.Load()
	x.storeAll(recs)
	assert.Equal(t, len(recs), x.len())
	after := x.s.tab.Load()
	require.NotSame(t, before, after)
	assert.Equal(t, len(recs)*1024/700+8, len(after.gslots), "installed at once, not stored one by one")
	checkSplitTables(t, x, "installed")
	checkIndex(t, 0, x, model, refs, repos)
	for i := range 200 { // written on: both tables grow from the installed counts
		r := randomRecord(rng, refs[i], repos)
		x.store(r)
		model[r.ImageRef] = r
		x.delete(refs[1000+i])
		delete(model, refs[1000+i])
	}
	checkSplitTables(t, x, "written on")
	checkIndex(t, 1, x, model, refs, repos)
}

// TestIndexFullPathKeepsBothTablesConsistent: a record that does not fit
// (maxArena, lowered here) drops its previous version from both tables,
// leaves the counts right, and marks the index full; the other records
// stay reachable through both tables.
func TestIndexFullPathKeepsBothTablesConsistent(t *testing.T) {
	saved := maxArena
	t.Cleanup(func() { maxArena = saved })
	repos := manyRepos(5)
	x := newRecordIndex()
	model := map[string]*ImageRecord{}
	var refs []string
	rng := rand.New(rand.NewPCG(4, 13))
	for i := range 50 {
		r := randomRecord(rng, benchRef(i), repos)
		x.store(r)
		model[r.ImageRef] = r
		refs = append(refs, r.ImageRef)
	}
	maxArena = x.s.live + x.s.garbage // full: nothing more fits
	for _, i := range []int{3, 17, 49} {
		bigger := randomRecord(rng, refs[i], repos)
		bigger.UnknownOrigin = "does not fit"
		x.store(bigger)
		delete(model, refs[i])
		checkSplitTables(t, x, fmt.Sprintf("full, record %d", i))
	}
	assert.True(t, x.full.Load(), "a lost record marks the index full")
	checkIndex(t, 0, x, model, refs, repos)
}
