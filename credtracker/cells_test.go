package credtracker

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strings"

	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/credential"
)

// The decision's cells (cells.go) are a second copy of the plain entries
// that a decision may admit by without reading the arena. These tests
// check that a cell never admits what the arena would refuse: every valid
// cell copies a live, cellable entry exactly (checkCells), a decision
// with cells is the decision without them, a revoked secret, another
// tenant, another repository or another digest is never admitted by a
// cell, and a revoking write is final for every decision after it.

// checkCells checks every valid cell of x's published table against the
// records of model (ref -> record): the cell's ref is a model record's,
// in its digest form; its repository hash is exactly one of that record's
// repositories', whose entry is cellable (at least one secret, not node
// accessible); its credential and coordinates are that entry's first
// secret's; it lies in the entry's window; no entry has two cells.
func checkCells(t *testing.T, x *recordIndex, model map[string]*ImageRecord, what string) (valid int) {
	t.Helper()
	s := &x.s
	s.mu.Lock()
	defer s.mu.Unlock()
	cells := s.tab.Load().cells
	require.Zero(t, len(cells)%cellWords, "%s: cells are whole", what)
	seen := map[[5]uint64]int{}
	for i := 0; i < len(cells)/cellWords; i++ {
		c := cells[i*cellWords : (i+1)*cellWords]
		seq := c[cellSeqAt].Load()
		if seq == 0 {
			continue
		}
		valid++
		require.Zero(t, seq&1, "%s: cell %d left half written", what, i)
		require.LessOrEqual(t, seq, s.cellSeq, "%s: cell %d's sequence number was never issued", what, i)
		var raw [32]byte
		var key [5]uint64
		for j := range 4 {
			key[j] = c[cellRefAt+j].Load()
			binary.LittleEndian.PutUint64(raw[8*j:], key[j])
		}
		key[4] = c[cellRepoAt].Load()
		prev, dup := seen[key]
		require.False(t, dup, "%s: cells %d and %d copy the same entry", what, prev, i)
		seen[key] = i
		ref := digestPrefix + hex.EncodeToString(raw[:])
		rec := model[ref]
		require.NotNil(t, rec, "%s: cell %d copies %s, which has no record", what, i, ref)
		var repos []string
		for repo := range rec.Repositories {
			if maphash.String(x.seed, repo) == key[4] {
				repos = append(repos, repo)
			}
		}
		require.Len(t, repos, 1, "%s: cell %d's repository hash is one repository of %s", what, i, ref)
		rr := rec.Repositories[repos[0]]
		require.False(t, rr.NodeAccessible, "%s: cell %d copies a node-accessible entry", what, i)
		require.NotEmpty(t, rr.Secrets, "%s: cell %d copies an entry with no secret", what, i)
		s0 := rr.Secrets[0]
		assert.Equal(t, binary.LittleEndian.Uint64(s0.Hash[:8]), c[cellCredAt].Load(), "%s: cell %d's credential is the entry's first secret's", what, i)
		assert.Equal(t, uint64(coordsHash(x.seed, s0.Namespace, s0.Name, s0.UID)), c[cellCoordsAt].Load(), "%s: cell %d's coordinates are the first secret's", what, i)
		hp := mix(maphash.String(x.seed, ref), key[4])
		ha, hb := home(hp, cellHomes(cells)), home(hp>>32, cellHomes(cells))
		assert.True(t, i >= ha && i < ha+cellWindow || i >= hb && i < hb+cellWindow,
			"%s: cell %d outside its entry's windows [%d, %d) and [%d, %d)", what, i, ha, ha+cellWindow, hb, hb+cellWindow)
	}
	return valid
}

var cellEpoch = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// cellRepos are the repositories of the cells' tests.
var cellRepos = manyRepos(4)

// rawRef returns a ref of a digest's length that is not a digest in
// canonical form (kept raw by the index).
func rawRef(i int) string { return strings.ToUpper(benchRef(i)) }

// TestCellsCopyLiveEntries drives random stores, replaces, deletes,
// forced rebuilds, growth and start-up installs over records of several
// repositories and secrets, node-accessible entries and raw refs, and
// checks every cell against the model after each step.
func TestCellsCopyLiveEntries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		seed  uint64
		refs  int
		steps int
	}{
		{"few records, much churn", 1, 40, 1500},
		{"growth and rebuilds", 2, 600, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(tc.seed, 13))
			refOf := func(i int) string {
				if i%7 == 3 {
					return rawRef(i)
				}
				return benchRef(i)
			}
			x := newRecordIndex()
			model := map[string]*ImageRecord{}
			var initial []*ImageRecord
			for i := range tc.refs / 2 {
				r := randomRecord(rng, refOf(i), cellRepos)
				initial = append(initial, r)
				model[r.ImageRef] = r
			}
			x.storeAll(initial) // the start-up install
			cells := checkCells(t, x, model, "installed")
			assert.Positive(t, cells, "the install made cells")
			maxCells := cells
			for step := range tc.steps {
				ref := refOf(rng.IntN(tc.refs))
				switch op := rng.IntN(20); {
				case op < 13:
					r := randomRecord(rng, ref, cellRepos)
					x.store(r)
					model[ref] = r
				case op < 18:
					x.delete(ref)
					delete(model, ref)
				case op < 19:
					forceRebuild(x)
				default: // emptied, then installed again
					for r := range model {
						x.delete(r)
					}
					model = map[string]*ImageRecord{}
					var recs []*ImageRecord
					for i := range 1 + rng.IntN(tc.refs) {
						r := randomRecord(rng, refOf(i), cellRepos)
						recs = append(recs, r)
						model[r.ImageRef] = r
					}
					x.storeAll(recs)
				}
				maxCells = max(maxCells, checkCells(t, x, model, fmt.Sprintf("step %d", step)))
				if t.Failed() {
					return
				}
			}
			assert.Greater(t, maxCells, tc.refs/8, "the cells were in use")
		})
	}
}

// cellTracker returns a tracker over a new directory, with a fake clock.
func cellTracker(t *testing.T, clock *clocktesting.FakeClock) *tracker {
	t.Helper()
	tr, err := New(context.Background(), Config{Dir: t.TempDir()}, nil, WithClock(clock), WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	return tr.(*tracker)
}

// cellHash returns the k-th credential hash of the cells' tests: distinct
// in their first 8 bytes.
func cellHash(k int) credential.Hash {
	var h credential.Hash
	h[0], h[5], h[31] = byte(k+1), 0x5c, byte(k)
	return h
}

// cellSecret returns the k-th pool secret with coordinates c (c < 0:
// none).
func cellSecret(k, c int) SecretEntry {
	e := SecretEntry{Hash: cellHash(k), Verified: cellEpoch}
	if c >= 0 {
		e.Namespace, e.Name, e.UID = fmt.Sprintf("ns-%d", c), "regcred", fmt.Sprintf("uid-%d", c)
	}
	return e
}

// randomCellRecord returns a record of ref over cellRepos drawn from the
// pools (hashes 0-4, coordinates 0-2).
func randomCellRecord(rng *rand.Rand, ref string) *ImageRecord {
	r := &ImageRecord{ImageRef: ref, Updated: cellEpoch, Repositories: map[string]*RepositoryRecord{}}
	for _, repo := range cellRepos[:3] {
		if rng.IntN(4) == 0 {
			continue
		}
		rr := &RepositoryRecord{NodeAccessible: rng.IntN(8) == 0, Updated: cellEpoch}
		if !rr.NodeAccessible {
			for range rng.IntN(4) {
				rr.Secrets = append(rr.Secrets, cellSecret(rng.IntN(5), rng.IntN(4)-1))
			}
			if rng.IntN(3) == 0 {
				rr.ServiceAccounts = append(rr.ServiceAccounts, ServiceAccountEntry{Namespace: "ns-0", Name: "sa", UID: fmt.Sprintf("sa-%d", rng.IntN(2)), Verified: cellEpoch})
			}
		}
		r.Repositories[repo] = rr
	}
	return r
}

// randomCreds returns 0-3 credentials a pod might present: pool secrets
// (or unknown hashes, or no hash) with or without coordinates, service
// accounts, node credentials.
func randomCreds(rng *rand.Rand) []credential.Credential {
	var out []credential.Credential
	for range rng.IntN(4) {
		var c credential.Credential
		switch rng.IntN(10) {
		case 0:
			c.Source = credential.Source{Kind: credential.SourceServiceAccount, Namespace: "ns-0", Name: "sa", UID: fmt.Sprintf("sa-%d", rng.IntN(3))}
		case 1:
			c.Source = credential.Source{Kind: credential.SourceNode}
			c.Hash = cellHash(rng.IntN(6))
		default:
			c.Source = credential.Source{Kind: credential.SourceSecret}
			if k := rng.IntN(4); k > 0 {
				c.Source.Namespace, c.Source.Name, c.Source.UID = fmt.Sprintf("ns-%d", k-1), "regcred", fmt.Sprintf("uid-%d", k-1)
			}
			if rng.IntN(6) > 0 {
				c.Hash = cellHash(rng.IntN(6)) // 5 is nobody's
			}
		}
		out = append(out, c)
	}
	return out
}

// cellRequest is a request for ref under repo with creds.
func cellRequest(repo, ref string, creds []credential.Credential) Request {
	image := repo + ":v1"
	return Request{Image: image, ImageRef: ref, Names: []string{image}, PullPolicy: corev1.PullIfNotPresent,
		Credentials: func() []credential.Credential { return creds }}
}

// TestCellsDecideAsTheArena: two trackers hold the same records; one
// decides with its cells, the other from the arena alone (noCells). For
// random requests (matching and foreign credentials, in any order, with
// and without coordinates, service accounts, other repositories of the
// same digest, other digests) both decide the same, and remember the same
// coordinates.
func TestCellsDecideAsTheArena(t *testing.T) {
	clock := clocktesting.NewFakeClock(cellEpoch)
	withCells, arena := cellTracker(t, clock), cellTracker(t, clock)
	arena.noCells = true
	rng := rand.New(rand.NewPCG(7, 13))
	refs := make([]string, 24)
	for i := range refs {
		refs[i] = benchRef(i)
		if i%8 == 7 {
			refs[i] = rawRef(i)
		}
	}
	both := func(fn func(tr *tracker)) { fn(withCells); fn(arena) }
	for _, ref := range refs[:20] { // refs 20-23 have no record
		r := randomCellRecord(rng, ref)
		both(func(tr *tracker) { tr.images.store(r.clone()) })
	}
	byCell, admitted := 0, 0
	for step := range 6000 {
		switch op := rng.IntN(100); {
		case op < 3:
			r := randomCellRecord(rng, refs[rng.IntN(20)])
			both(func(tr *tracker) { tr.images.store(r.clone()) })
		case op < 4:
			ref := refs[rng.IntN(20)]
			both(func(tr *tracker) { tr.images.delete(ref) })
		case op < 5:
			c := rng.IntN(3)
			both(func(tr *tracker) {
				require.NoError(t, tr.ForgetSecret(fmt.Sprintf("ns-%d", c), "regcred", fmt.Sprintf("uid-%d", c)))
			})
		}
		repo, ref := cellRepos[rng.IntN(3)], refs[rng.IntN(20)]
		if rng.IntN(8) == 0 { // another repository, or a digest with no record
			repo, ref = cellRepos[rng.IntN(len(cellRepos))], refs[rng.IntN(len(refs))]
		}
		creds := randomCreds(rng)
		if r := arena.images.load(ref); r != nil && r.Repositories[repo] != nil && len(r.Repositories[repo].Secrets) > 0 && rng.IntN(2) == 0 {
			// The entry's first secret, as its holder or as someone
			// holding the same content under other coordinates.
			s0 := r.Repositories[repo].Secrets[rng.IntN(len(r.Repositories[repo].Secrets))]
			c := credential.Credential{Hash: s0.Hash, Source: credential.Source{Kind: credential.SourceSecret, Namespace: s0.Namespace, Name: s0.Name, UID: s0.UID}}
			if rng.IntN(4) == 0 {
				c.Source.UID += "-new"
			}
			at := rng.IntN(len(creds) + 1)
			creds = append(creds[:at], append([]credential.Credential{c}, creds[at:]...)...)
		}
		req := cellRequest(repo, ref, creds)
		if withCells.decidesByCell(req, mustRepo(t, req.Image)) {
			byCell++
		}
		got, want := withCells.Decide(req), arena.Decide(req)
		require.Equal(t, want, got, "step %d: %s under %s with %+v", step, req.ImageRef, req.Image, sources(req))
		if got.Action == UseImage {
			admitted++
		}
		require.Equal(t, arena.images.load(req.ImageRef), withCells.images.load(req.ImageRef), "step %d: the records after the decision", step)
	}
	assert.Greater(t, byCell, 150, "cells decided")
	assert.Greater(t, admitted, byCell, "the arena decided too")
	checkCells(t, withCells.images, recordsOf(withCells), "after the requests")
}

func mustRepo(t *testing.T, image string) string {
	t.Helper()
	repo, err := RepositoryName(image)
	require.NoError(t, err)
	return repo
}

// sources describes a request's credentials without their content.
func sources(req Request) []string {
	var out []string
	for _, c := range req.Credentials() {
		out = append(out, fmt.Sprintf("%s hash %x…", c.Source.String(), c.Hash[:2]))
	}
	return out
}

// recordsOf returns tr's records by ref.
func recordsOf(tr *tracker) map[string]*ImageRecord {
	out := map[string]*ImageRecord{}
	for _, r := range tr.images.all() {
		out[r.ImageRef] = r
	}
	return out
}

// cellCred is a pod's credential of hash k held by the pool secret of
// coordinates c.
func cellCred(k, c int) credential.Credential {
	s := cellSecret(k, c)
	return credential.Credential{Registry: "registry.example", Hash: s.Hash,
		Source: credential.Source{Kind: credential.SourceSecret, Namespace: s.Namespace, Name: s.Name, UID: s.UID}}
}

// cellScene pulls ref D as repository cellRepos[0] with tenant A's secret
// (hash 0, coordinates 0) then tenant B's (hash 1, coordinates 1), and as
// cellRepos[1] with B's only, through the tracker's API.
func cellScene(t *testing.T, tr *tracker, ref string) {
	t.Helper()
	pull := func(repo string, cred credential.Credential) {
		require.NoError(t, tr.RecordPullIntent(repo+":v1"))
		require.NoError(t, tr.RecordImagePulled(repo+":v1", ref, cred))
	}
	pull(cellRepos[0], cellCred(0, 0))
	pull(cellRepos[0], cellCred(1, 1))
	pull(cellRepos[1], cellCred(1, 1))
	// A new index has no cells until its table is first rebuilt (it grows,
	// or is compacted); start-up installs make them too.
	forceRebuild(tr.images)
	require.True(t, tr.decidesByCell(cellRequest(cellRepos[0], ref, []credential.Credential{cellCred(0, 0)}), cellRepos[0]),
		"tenant A's entry has its cell")
}

// arenaDecide decides req from the arena alone.
func arenaDecide(tr *tracker, req Request) Decision {
	tr.noCells = true
	defer func() { tr.noCells = false }()
	return tr.Decide(req)
}

// TestCellsNeverAdmitRevoked: once tenant A's secret leaves the entry
// (the record replaced without it, the repository dropped, the secret or
// its namespace forgotten, the image pruned), no decision admits A's
// credential by the cell the entry had; the decision is the arena's.
func TestCellsNeverAdmitRevoked(t *testing.T) {
	ref := benchRef(1)
	for _, tc := range []struct {
		name   string
		revoke func(t *testing.T, tr *tracker, clock *clocktesting.FakeClock)
	}{
		{"replaced without the secret", func(t *testing.T, tr *tracker, _ *clocktesting.FakeClock) {
			r := tr.images.load(ref)
			rr := r.Repositories[cellRepos[0]]
			rr.Secrets = rr.Secrets[1:]
			tr.images.store(r)
		}},
		{"repository dropped", func(t *testing.T, tr *tracker, _ *clocktesting.FakeClock) {
			r := tr.images.load(ref)
			delete(r.Repositories, cellRepos[0])
			tr.images.store(r)
		}},
		{"secret forgotten", func(t *testing.T, tr *tracker, _ *clocktesting.FakeClock) {
			require.NoError(t, tr.ForgetSecret("ns-0", "regcred", "uid-0"))
		}},
		{"namespace forgotten", func(t *testing.T, tr *tracker, _ *clocktesting.FakeClock) {
			require.NoError(t, tr.ForgetNamespace("ns-0"))
		}},
		{"image pruned", func(t *testing.T, tr *tracker, clock *clocktesting.FakeClock) {
			_, err := tr.PruneImages(nil, clock.Now().Add(time.Hour))
			require.NoError(t, err)
			require.Nil(t, tr.images.load(ref))
		}},
		{"replaced when the index is full", func(t *testing.T, tr *tracker, _ *clocktesting.FakeClock) {
			saved := maxArena
			t.Cleanup(func() { maxArena = saved })
			maxArena = tr.images.s.live // the new version does not fit: the old one goes
			r := tr.images.load(ref)
			r.Repositories[cellRepos[2]] = &RepositoryRecord{NodeAccessible: true}
			tr.images.store(r)
			require.True(t, tr.images.full.Load())
			require.Nil(t, tr.images.load(ref))
		}},
		{"record deleted after a rebuild", func(t *testing.T, tr *tracker, _ *clocktesting.FakeClock) {
			forceRebuild(tr.images)
			tr.images.delete(ref)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(cellEpoch)
			tr := cellTracker(t, clock)
			cellScene(t, tr, ref)
			for _, creds := range [][]credential.Credential{
				{cellCred(0, 0)},
				{cellCred(0, -1)},
				{{Hash: cellHash(0), Source: credential.Source{Kind: credential.SourceNode}}},
				{{Source: credential.Source{Kind: credential.SourceSecret}}, cellCred(0, 0)},
			} {
				req := cellRequest(cellRepos[0], ref, creds)
				require.Equal(t, Decision{Action: UseImage, Reason: ReasonCredentialMatch}, tr.Decide(req), "before: %v", sources(req))
			}
			tc.revoke(t, tr, clock)
			checkCells(t, tr.images, recordsOf(tr), "revoked")
			for _, creds := range [][]credential.Credential{
				{cellCred(0, 0)},
				{cellCred(0, -1)},
				{cellCred(0, 2)},
				{{Hash: cellHash(0), Source: credential.Source{Kind: credential.SourceNode}}},
			} {
				req := cellRequest(cellRepos[0], ref, creds)
				assert.False(t, tr.decidesByCell(req, cellRepos[0]), "no cell admits %v", sources(req))
				got := tr.Decide(req)
				assert.NotEqual(t, ReasonCredentialMatch, got.Reason, "%v", sources(req))
				assert.Equal(t, arenaDecide(tr, req), got, "%v", sources(req))
			}
		})
	}
}

// TestCellsNeverAdmitANeighbour: A's cell admits no other tenant (a hash
// differing from A's in its first 8 bytes, under other coordinates), no
// request for another repository of the same digest, another digest or
// another spelling of A's; each such decision is the arena's.
func TestCellsNeverAdmitANeighbour(t *testing.T) {
	ref := benchRef(1)
	tr := cellTracker(t, clocktesting.NewFakeClock(cellEpoch))
	cellScene(t, tr, ref)
	flip := func(i int) credential.Credential {
		c := cellCred(0, 2)
		c.Hash[i] ^= 0x80
		return c
	}
	otherDigest := []byte(ref)
	otherDigest[len(otherDigest)-1] = '3'
	for _, tc := range []struct {
		name, repo, ref string
		creds           []credential.Credential
		want            Reason
	}{
		{"hash differing in its first byte", cellRepos[0], ref, []credential.Credential{flip(0)}, ReasonNoMatch},
		{"hash differing in its 8th byte", cellRepos[0], ref, []credential.Credential{flip(7)}, ReasonNoMatch},
		{"nobody's hash", cellRepos[0], ref, []credential.Credential{cellCred(5, 2)}, ReasonNoMatch},
		{"nobody's hash before A's", cellRepos[0], ref, []credential.Credential{cellCred(5, 2), cellCred(0, 0)}, ReasonCredentialMatch},
		{"B's hash (B's second in the entry)", cellRepos[0], ref, []credential.Credential{cellCred(1, 1)}, ReasonCredentialMatch},
		{"A's hash under a repository only B pulled", cellRepos[1], ref, []credential.Credential{cellCred(0, 0)}, ReasonNoMatch},
		{"A's hash under a repository nobody pulled", cellRepos[2], ref, []credential.Credential{cellCred(0, 0)}, 0},
		{"A's hash for another digest", cellRepos[0], string(otherDigest), []credential.Credential{cellCred(0, 0)}, 0},
		{"A's hash for A's digest in upper case", cellRepos[0], strings.ToUpper(ref), []credential.Credential{cellCred(0, 0)}, 0},
		{"A's hash for A's digest under another algorithm", cellRepos[0], "sha512:" + ref[len(digestPrefix):], []credential.Credential{cellCred(0, 0)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := cellRequest(tc.repo, tc.ref, tc.creds)
			byCell := tc.want == ReasonCredentialMatch && tc.creds[0].Hash == cellHash(0)
			assert.Equal(t, byCell, tr.decidesByCell(req, tc.repo), "decided by a cell")
			got := tr.Decide(req)
			assert.Equal(t, arenaDecide(tr, req), got)
			if tc.want != 0 {
				assert.Equal(t, tc.want, got.Reason)
			} else {
				assert.NotEqual(t, ReasonCredentialMatch, got.Reason)
			}
		})
	}
}

// TestCellsAfterRestart: records loaded at start-up (the bulk install)
// get their cells, which decide as the arena does; a maximum credential
// age turns the cells off, so that an expired secret is refused.
func TestCellsAfterRestart(t *testing.T) {
	ref := benchRef(1)
	dir := t.TempDir()
	clock := clocktesting.NewFakeClock(cellEpoch)
	open := func(cfg Config) *tracker {
		cfg.Dir = dir
		tr, err := New(context.Background(), cfg, nil, WithClock(clock), WithLogger(klog.Background().V(10)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		return tr.(*tracker)
	}
	tr := open(Config{})
	cellScene(t, tr, ref)
	for i := range 50 { // enough records that the start-up load installs them at once
		require.NoError(t, tr.RecordImagePulled(cellRepos[3]+":v1", benchRef(100+i), cellCred(i%5, i%3)))
	}
	require.NoError(t, tr.Close())

	for _, tc := range []struct {
		name   string
		maxAge time.Duration
		want   Reason // for A's secret, a day after its pull
		cells  bool
	}{
		{"no maximum age", 0, ReasonCredentialMatch, true},
		{"a maximum age of an hour", time.Hour, ReasonExpired, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock.SetTime(cellEpoch.Add(24 * time.Hour))
			tr := open(Config{CredentialMaxAge: tc.maxAge})
			checkCells(t, tr.images, recordsOf(tr), "loaded")
			reqA := cellRequest(cellRepos[0], ref, []credential.Credential{cellCred(0, 0)})
			require.True(t, tr.decidesByCell(reqA, cellRepos[0]), "A's entry has its cell after the load")
			assert.Equal(t, tc.want, tr.Decide(reqA).Reason)
			assert.Equal(t, arenaDecide(tr, reqA), tr.Decide(reqA))
			for _, req := range []Request{
				cellRequest(cellRepos[0], ref, []credential.Credential{cellCred(1, 1)}),
				cellRequest(cellRepos[1], ref, []credential.Credential{cellCred(0, 0)}),
				cellRequest(cellRepos[3], benchRef(100+7), []credential.Credential{cellCred(2, 1)}),
				cellRequest(cellRepos[3], benchRef(100+7), []credential.Credential{cellCred(3, 1)}),
			} {
				assert.Equal(t, arenaDecide(tr, req), tr.Decide(req), "%s under %s with %v", req.ImageRef, req.Image, sources(req))
			}
			require.NoError(t, tr.Close())
		})
	}
}

// decidesByCell is decideByCell for the entry (req.ImageRef, repo).
func (t *tracker) decidesByCell(req Request, repo string) bool {
	hr, hrepo := t.images.hashes(req.ImageRef, repo)
	return t.decideByCell(req, hr, hrepo)
}
