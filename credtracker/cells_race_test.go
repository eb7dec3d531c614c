package credtracker

import (
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/credential"
)

// The cells under concurrent readers (cells_test.go has the rest).

// TestCellsRevocationIsFinal: readers decide tenant A's request in a loop
// while a writer grants A's secret and revokes it again (by replacing the
// record without it, forgetting it, deleting the record), churning other
// records so that the table grows and is rebuilt under the readers. A
// decision that starts after a revoking write returned, and before the
// next grant started, never admits A by credential.
func TestCellsRevocationIsFinal(t *testing.T) {
	ref := benchRef(1)
	tr := cellTracker(t, clocktesting.NewFakeClock(cellEpoch))
	granted := &ImageRecord{ImageRef: ref, Updated: cellEpoch, Repositories: map[string]*RepositoryRecord{
		cellRepos[0]: {Updated: cellEpoch, Secrets: []SecretEntry{cellSecret(0, 0), cellSecret(1, 1)}},
		cellRepos[1]: {Updated: cellEpoch, Secrets: []SecretEntry{cellSecret(0, 0)}},
	}}
	revokes := []func(){
		func() { // replaced without A's secret
			r := granted.clone()
			r.Repositories[cellRepos[0]].Secrets = r.Repositories[cellRepos[0]].Secrets[1:]
			tr.images.store(r)
		},
		func() { // replaced with B's secret first and A's gone
			r := granted.clone()
			r.Repositories[cellRepos[0]].Secrets = []SecretEntry{cellSecret(1, 1), cellSecret(2, 2)}
			tr.images.store(r)
		},
		func() { tr.images.delete(ref) },
		func() { require.NoError(t, tr.ForgetSecret("ns-0", "regcred", "uid-0")) },
	}
	var gen atomic.Uint64 // odd: revoked (or never granted), and no grant has started since
	gen.Store(1)
	var bad, byCell, admitted atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			creds := []credential.Credential{cellCred(0, 0)}
			if w == 1 {
				creds = []credential.Credential{{Hash: cellHash(0), Source: credential.Source{Kind: credential.SourceNode}}}
			}
			req := cellRequest(cellRepos[0], ref, creds)
			for {
				select {
				case <-done:
					return
				default:
				}
				g1 := gen.Load()
				d := tr.Decide(req)
				g2 := gen.Load()
				if d.Reason == ReasonCredentialMatch {
					admitted.Add(1)
					if g1&1 == 1 && g1 == g2 {
						bad.Add(1)
					}
				}
				if tr.decidesByCell(req, cellRepos[0]) {
					byCell.Add(1)
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(5, 13))
	for cycle := range 400 {
		gen.Add(1) // even: granting
		tr.images.store(granted.clone())
		for range 8 { // churn: growth, compaction, rebuilds
			other := benchRef(100 + rng.IntN(300))
			if rng.IntN(3) == 0 {
				tr.images.delete(other)
			} else {
				tr.images.store(randomCellRecord(rng, other))
			}
		}
		if cycle%50 == 0 {
			forceRebuild(tr.images)
		}
		revokes[cycle%len(revokes)]()
		gen.Add(1) // odd: revoked
		req := cellRequest(cellRepos[0], ref, []credential.Credential{cellCred(0, 0)})
		require.NotEqual(t, ReasonCredentialMatch, tr.Decide(req).Reason, "cycle %d: right after the revoking write", cycle)
	}
	close(done)
	wg.Wait()
	assert.Zero(t, bad.Load(), "decisions that admitted A after its revocation")
	assert.Positive(t, admitted.Load(), "the readers saw A admitted while granted")
	t.Logf("admitted %d, of which by cells %d (seen)", admitted.Load(), byCell.Load())
	checkCells(t, tr.images, recordsOf(tr), "after the cycles")
}

// TestCellsReusedCellNeverMixesEntries: two images whose entries share a
// window are stored and deleted in turn, so that one cell holds X's entry
// (A's secret), then nothing, then Y's (B's secret), while readers ask for
// X with B's credential and for Y with A's. A reader that mixed what it
// read of one filling with another's (the sequence lock broken) would
// admit; the arena never does.
func TestCellsReusedCellNeverMixesEntries(t *testing.T) {
	tr := cellTracker(t, clocktesting.NewFakeClock(cellEpoch))
	rng := rand.New(rand.NewPCG(9, 13))
	for i := range 24 {
		tr.images.store(randomCellRecord(rng, benchRef(1000+i)))
	}
	forceRebuild(tr.images)
	x := tr.images
	repo := cellRepos[0]
	hrepo := maphash.String(x.seed, repo)
	n := cellHomes(x.s.tab.Load().cells)
	require.Positive(t, n)
	record := func(ref string, k int) *ImageRecord {
		return &ImageRecord{ImageRef: ref, Updated: cellEpoch, Repositories: map[string]*RepositoryRecord{
			repo: {Updated: cellEpoch, Secrets: []SecretEntry{cellSecret(k, -1)}}}}
	}
	hasCell := func(ref string) bool {
		c, _ := x.cellFind(maphash.String(x.seed, ref), hrepo, ref)
		return c != nil
	}
	refX := ""
	for i := 1; refX == ""; i++ { // an image whose window has room
		x.store(record(benchRef(i), 0))
		if hasCell(benchRef(i)) {
			refX = benchRef(i)
		}
		x.delete(benchRef(i))
	}
	require.Equal(t, n, cellHomes(x.s.tab.Load().cells), "no rebuild yet")
	homeOf := func(ref string) int { return home(mix(maphash.String(x.seed, ref), hrepo), n) }
	refY := ""
	for i := 100; refY == ""; i++ {
		if homeOf(benchRef(i)) == homeOf(refX) {
			refY = benchRef(i)
		}
	}
	x.store(record(refY, 1))
	require.True(t, hasCell(refY), "Y takes the cell X had")
	x.delete(refY)
	done := make(chan struct{})
	var bad, seen atomic.Int64
	var wg sync.WaitGroup
	for _, req := range []Request{
		cellRequest(repo, refX, []credential.Credential{{Hash: cellHash(1), Source: credential.Source{Kind: credential.SourceNode}}}),
		cellRequest(repo, refY, []credential.Credential{{Hash: cellHash(0), Source: credential.Source{Kind: credential.SourceNode}}}),
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if tr.Decide(req).Reason == ReasonCredentialMatch {
					bad.Add(1)
				}
				if c, _ := x.cellFind(maphash.String(x.seed, req.ImageRef), hrepo, req.ImageRef); c != nil {
					seen.Add(1)
				}
			}
		}()
	}
	for range 3000 {
		x.store(record(refX, 0))
		x.delete(refX)
		x.store(record(refY, 1))
		x.delete(refY)
	}
	close(done)
	wg.Wait()
	assert.Zero(t, bad.Load(), "decisions that admitted a credential the image never listed")
	assert.Positive(t, seen.Load(), "the readers found the cells")
}

// TestCellsReadersThroughGrowth: readers decide a stable record's request
// in a loop while a writer adds records until the cells have been made
// anew several times (growCells) and the table rebuilt; every decision is
// the credential match, by a cell or by the arena, and most entries have a
// cell at the end.
func TestCellsReadersThroughGrowth(t *testing.T) {
	ref := benchRef(0)
	tr := cellTracker(t, clocktesting.NewFakeClock(cellEpoch))
	tr.images.store(&ImageRecord{ImageRef: ref, Updated: cellEpoch, Repositories: map[string]*RepositoryRecord{
		cellRepos[0]: {Updated: cellEpoch, Secrets: []SecretEntry{cellSecret(0, 0)}},
	}})
	req := cellRequest(cellRepos[0], ref, []credential.Credential{cellCred(0, 0)})
	var wrong, decided atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if d := tr.Decide(req); d.Action != UseImage || d.Reason != ReasonCredentialMatch {
					wrong.Add(1)
				}
				decided.Add(1)
			}
		})
	}
	grown := 0
	for i := 1; i <= 3000; i++ {
		before := tr.images.s.tab.Load().cells
		tr.images.store(&ImageRecord{ImageRef: benchRef(i), Updated: cellEpoch, Repositories: map[string]*RepositoryRecord{
			cellRepos[i%len(cellRepos)]: {Updated: cellEpoch, Secrets: []SecretEntry{cellSecret(i%7, i%7)}},
		}})
		if len(tr.images.s.tab.Load().cells) != len(before) {
			grown++
		}
	}
	close(done)
	wg.Wait()
	assert.Zero(t, wrong.Load(), "decisions other than the credential match, of %d", decided.Load())
	assert.Greater(t, grown, 5, "the cells were made anew")
	// Most entries have a cell after growth (any one may not: its windows
	// may be full).
	assert.GreaterOrEqual(t, cellsFilled(tr.images)*10, 3001*9, "entries with a cell")
}
