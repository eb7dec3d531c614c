package credtracker

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
)

// TestIndexMatchesModel runs random operation sequences on the index and
// on a plain map (the reference model) and checks, after every operation,
// that every look-up the tracker makes answers the same.
func TestIndexMatchesModel(t *testing.T) {
	for seed := range uint64(scaled(2, 20)) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			refs := make([]string, 40)
			for i := range refs {
				refs[i] = fmt.Sprintf("sha256:%064x", rng.Uint64())
			}
			refs[0] = "short"                             // not a digest: kept as it is
			refs[1] = "sha256:" + strings.Repeat("A", 64) // upper case: kept as it is
			repos := []string{"registry.example/a/app", "registry.example/b/app", "docker.io/library/alpine"}
			runModel(t, rng, 400, 5, refs, repos, randomRecord, nil)
		})
	}
}

// runModel applies steps random operations (store, delete, storeAll of up
// to maxBulk records) to a new index and to a plain map, the records made
// by rec over refs and repos, and checks after each that every look-up
// the tracker makes answers the same (checkIndex), then calls more (if
// set) for checks of its own.
func runModel(t *testing.T, rng *rand.Rand, steps, maxBulk int, refs, repos []string, rec func(*rand.Rand, string, []string) *ImageRecord, more func(step int, x *recordIndex)) {
	t.Helper()
	x := newRecordIndex()
	model := map[string]*ImageRecord{}
	for step := range steps {
		switch op := rng.IntN(10); {
		case op < 6:
			r := rec(rng, refs[rng.IntN(len(refs))], repos)
			x.store(r)
			model[r.ImageRef] = r
		case op < 8:
			ref := refs[rng.IntN(len(refs))]
			x.delete(ref)
			delete(model, ref)
		default:
			var bulk []*ImageRecord
			for range rng.IntN(maxBulk) {
				r := rec(rng, refs[rng.IntN(len(refs))], repos)
				bulk = append(bulk, r)
				model[r.ImageRef] = r
			}
			x.storeAll(bulk)
		}
		checkIndex(t, step, x, model, refs, repos)
		if more != nil {
			more(step, x)
		}
	}
}

func checkIndex(t *testing.T, step int, x *recordIndex, model map[string]*ImageRecord, refs, repos []string) {
	t.Helper()
	require.Equal(t, len(model), x.len(), "step %d: record count", step)
	got := x.all()
	slices.SortFunc(got, func(a, b *ImageRecord) int { return compareStrings(a.ImageRef, b.ImageRef) })
	want := slices.SortedFunc(maps.Values(model), func(a, b *ImageRecord) int { return compareStrings(a.ImageRef, b.ImageRef) })
	require.Equal(t, want, got, "step %d: all records", step)
	for _, ref := range refs {
		require.Equal(t, model[ref], x.load(ref), "step %d: load(%s)", step, ref)
		for _, repo := range repos {
			v, ok := x.loadRepository(ref, repo)
			var rr *RepositoryRecord
			if r := model[ref]; r != nil {
				rr = r.Repositories[repo]
			}
			require.Equal(t, rr != nil, ok, "step %d: loadRepository(%s, %s) found", step, ref, repo)
			if rr == nil {
				continue
			}
			// What the decision reads from the entry in place.
			assert.Equal(t, rr.NodeAccessible, v.nodeAccessible())
			assert.Equal(t, unixNano(rr.Updated), v.updated())
			require.Equal(t, len(rr.Secrets), v.secrets())
			require.Equal(t, len(rr.ServiceAccounts), v.serviceAccounts())
			for i, s := range rr.Secrets {
				assert.True(t, v.hashIs(i, &s.Hash), "step %d: secret %d hash", step, i)
				assert.Equal(t, unixNano(s.Verified), v.secretVerified(i))
				assert.True(t, v.findSecret(credential.Source{Kind: credential.SourceSecret, Namespace: s.Namespace, Name: s.Name, UID: s.UID}, func(int) bool { return true }))
			}
			for j, sa := range rr.ServiceAccounts {
				assert.Equal(t, unixNano(sa.Verified), v.saVerified(j))
			}
			assert.Equal(t, rr, v.record(), "step %d: entry (%s, %s)", step, ref, repo)
		}
		g, ok := x.loadGroup(ref)
		require.Equal(t, model[ref] != nil, ok)
		if ok {
			assert.Equal(t, model[ref].UnknownOrigin != "", g.unknownOrigin())
			assert.Equal(t, unixNano(model[ref].Updated), g.updated())
			assert.Equal(t, ref, g.refString())
		}
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func randomRecord(rng *rand.Rand, ref string, repos []string) *ImageRecord {
	at := func() time.Time {
		if rng.IntN(8) == 0 {
			return time.Time{}
		}
		return time.Unix(1_700_000_000+rng.Int64N(1_000_000), rng.Int64N(1e9)).UTC()
	}
	r := &ImageRecord{ImageRef: ref, Updated: at(), Repositories: map[string]*RepositoryRecord{}}
	if rng.IntN(6) == 0 {
		r.UnknownOrigin = "record unreadable"
	}
	for _, repo := range repos {
		if rng.IntN(2) == 0 {
			continue
		}
		rr := &RepositoryRecord{NodeAccessible: rng.IntN(4) == 0, Updated: at()}
		if !rr.NodeAccessible {
			for k := range rng.IntN(4) {
				var h credential.Hash
				h[0], h[31] = byte(rng.IntN(4)), byte(k)
				rr.Secrets = append(rr.Secrets, SecretEntry{Namespace: fmt.Sprintf("ns-%d", rng.IntN(3)), Name: "s", UID: fmt.Sprintf("uid-%d", rng.IntN(5)), Hash: h, Verified: at()})
			}
			for range rng.IntN(3) {
				rr.ServiceAccounts = append(rr.ServiceAccounts, ServiceAccountEntry{Namespace: "ns", Name: "sa", UID: fmt.Sprintf("sa-%d", rng.IntN(5)), Verified: at()})
			}
		}
		r.Repositories[repo] = rr
	}
	return r
}

// TestIndexReadersNeverMissAStableRecord: while a writer replaces,
// deletes and adds records (growing, compacting and rebuilding the
// stripes' tables), lock-free readers always find the records that stay,
// with their content: a record missing for an instant would make its
// image look preloaded.
func TestIndexReadersNeverMissAStableRecord(t *testing.T) {
	x := newRecordIndex()
	rng := rand.New(rand.NewPCG(1, 2))
	repos := []string{"registry.example/a/app", "registry.example/b/app"}
	stable := make([]*ImageRecord, 64)
	for i := range stable {
		stable[i] = randomRecord(rng, fmt.Sprintf("sha256:%064x", i), repos[:1])
		stable[i].Repositories[repos[0]] = &RepositoryRecord{Secrets: []SecretEntry{{Namespace: "ns", Name: "s", UID: "u", Hash: credential.Hash{byte(i), 1}}}}
	}
	x.storeAll(stable)
	done := make(chan struct{})
	errs := make(chan string, 4)
	for range 2 {
		go func() {
			defer func() { errs <- "" }()
			for {
				select {
				case <-done:
					return
				default:
				}
				for i, r := range stable {
					v, ok := x.loadRepository(r.ImageRef, repos[0])
					h := credential.Hash{byte(i), 1}
					if !ok || !v.hashIs(0, &h) {
						errs <- fmt.Sprintf("record %d missing or changed", i)
						return
					}
				}
			}
		}()
	}
	for step := range 3000 {
		ref := fmt.Sprintf("sha256:%064x", 1000+rng.IntN(200))
		if rng.IntN(3) == 0 {
			x.delete(ref)
		} else {
			x.store(randomRecord(rng, ref, repos))
		}
		if step%5 == 0 {
			// Rewrite a stable record with the same content.
			i := rng.IntN(len(stable))
			x.store(stable[i])
		}
	}
	close(done)
	for range 2 {
		if msg := <-errs; msg != "" {
			t.Fatal(msg)
		}
	}
}
