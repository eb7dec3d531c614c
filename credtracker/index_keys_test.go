package credtracker

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
)

// adversarialRefs are image refs that sit next to one another in the
// index's key space: a digest and every near miss of it (other case, other
// algorithm, one digit short or long, an embedded NUL, its 32 raw bytes),
// refs that are prefixes of one another, and very long ones.
func adversarialRefs() []string {
	raw := make([]byte, 32)
	for i := range raw {
		raw[i] = byte(0xa7 * (i + 1))
	}
	dig := hex.EncodeToString(raw)
	upper := strings.ToUpper(dig)
	return []string{
		"sha256:" + dig,
		"sha256:" + upper,
		"sha256:" + upper[:1] + dig[1:], // one upper-case digit
		"SHA256:" + dig,
		"sha512:" + dig, // the digest's length, another algorithm
		"sha256:" + dig[:63],
		"sha256:" + dig[:63] + "\x00",
		"sha256:" + dig + "\x00",
		"sha256:" + dig[:63] + "g",
		"sha256:" + dig[:32] + "\x00" + dig[33:],
		"sha256:" + strings.Repeat("0", 64),
		"sha256:" + strings.Repeat("f", 64),
		string(raw), // the digest's stored bytes, as a ref of its own
		"sha256:" + dig[:57] + "sha256:",
		"a", "ab", "abc", // prefixes of one another
		"a\x00",
		"",
		strings.Repeat("r", 70000),
		strings.Repeat("r", 70001),
	}
}

// adversarialRepos are repository names that are prefixes of one another,
// concatenate with the refs above into the same bytes, or are long.
func adversarialRepos() []string {
	return []string{
		"registry.example/a",
		"registry.example/a/b",
		"registry.example/ab",
		"registry.example/a\x00",
		"bc", "c", "abc", // "a"+"bc" == "ab"+"c" == ""+"abc"
		strings.Repeat("n", 5000),
		strings.Repeat("n", 5001),
	}
}

// TestIndexAdversarialKeysMatchModel is TestIndexMatchesModel over keys
// chosen to collide in part: whatever the index stores under one key, a
// look-up under any other key must not find it, and a look-up under its
// key must find it, whole.
func TestIndexAdversarialKeysMatchModel(t *testing.T) {
	refs, repos := adversarialRefs(), adversarialRepos()
	for seed := range uint64(scaled(1, 6)) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 13))
			runModel(t, rng, 150, 6, refs, repos, adversarialRecord, func(step int, x *recordIndex) {
				for _, ref := range refs {
					_, ok := x.loadRepository(ref, "")
					require.False(t, ok, "step %d: the empty repository is never found", step)
				}
			})
		})
	}
}

// adversarialRecord is a random record for ref over repos, now and then
// with no repository (its ref is kept in its group), an empty one, or a
// long reason.
func adversarialRecord(rng *rand.Rand, ref string, repos []string) *ImageRecord {
	r := randomRecord(rng, ref, repos[:0])
	switch rng.IntN(4) {
	case 0: // no repository
	case 1:
		r.Repositories[repos[rng.IntN(len(repos))]] = &RepositoryRecord{}
	default:
		for _, repo := range repos {
			if rng.IntN(3) == 0 {
				for r.Repositories[repo] == nil {
					r.Repositories[repo] = randomRecord(rng, ref, []string{repo}).Repositories[repo]
				}
			}
		}
	}
	if rng.IntN(5) == 0 {
		r.UnknownOrigin = strings.Repeat("u", 1+rng.IntN(3000))
	}
	return r
}

// TestIndexKeepsLargeRecordsWhole: the largest records the tracker can
// hold (DefaultMaxEntries secrets and service accounts whose coordinates
// are as long as the store allows, thousands of repositories, a long
// reason) come back exactly as stored, and the decision's in-place reads
// agree with them.
func TestIndexKeepsLargeRecordsWhole(t *testing.T) {
	long := func(c string, i int) string { return fmt.Sprintf("%04d", i) + strings.Repeat(c, maxStringLen-4) }
	at := time.Unix(1_700_000_000, 123).UTC()
	full := &RepositoryRecord{Updated: at}
	for i := range DefaultMaxEntries {
		var h credential.Hash
		binary.LittleEndian.PutUint64(h[:], uint64(i)+1)
		full.Secrets = append(full.Secrets, SecretEntry{Namespace: long("n", i), Name: long("s", i), UID: long("u", i), Hash: h, Verified: at.Add(time.Duration(i))})
		full.ServiceAccounts = append(full.ServiceAccounts, ServiceAccountEntry{Namespace: long("n", i), Name: long("a", i), UID: long("v", i), Verified: at.Add(-time.Duration(i))})
	}
	big := &ImageRecord{ImageRef: benchRef(1), Updated: at, UnknownOrigin: strings.Repeat("x", 1<<20),
		Repositories: map[string]*RepositoryRecord{"registry.example/full": full}}
	many := &ImageRecord{ImageRef: benchRef(2), Updated: at, Repositories: map[string]*RepositoryRecord{}}
	for i := range 3000 {
		many.Repositories[fmt.Sprintf("registry.example/r%d", i)] = &RepositoryRecord{NodeAccessible: i%2 == 0, Updated: at,
			Secrets: []SecretEntry{{Namespace: "ns", Name: "s", UID: fmt.Sprint(i), Hash: credential.Hash{byte(i), byte(i >> 8), 1}, Verified: at}}}
	}
	for _, bulk := range []bool{false, true} {
		t.Run(fmt.Sprintf("bulk=%v", bulk), func(t *testing.T) {
			x := newRecordIndex()
			if bulk {
				x.storeAll([]*ImageRecord{big, many})
			} else {
				x.store(big)
				x.store(many)
			}
			model := map[string]*ImageRecord{big.ImageRef: big, many.ImageRef: many}
			checkIndex(t, 0, x, model, []string{big.ImageRef, many.ImageRef, benchRef(3)},
				[]string{"registry.example/full", "registry.example/r0", "registry.example/r2999", "registry.example/r3000"})
			for repo, rr := range many.Repositories {
				v, ok := x.loadRepository(many.ImageRef, repo)
				require.True(t, ok, repo)
				assert.Equal(t, rr, v.record(), repo)
			}
		})
	}
}

// TestRefIsRejectsEveryNearMiss: a stored digest matches its own ref and
// no ref that differs from it in any one byte, whatever that byte is.
func TestRefIsRejectsEveryNearMiss(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 4 {
		var raw [32]byte
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		ref := "sha256:" + hex.EncodeToString(raw[:])
		kind, n := storedRef(ref)
		require.Equal(t, byte(refDigest), kind)
		stored := make([]byte, n)
		require.Equal(t, n, putRef(stored, kind, ref))
		require.Equal(t, raw[:], stored)
		require.True(t, refIs(kind, stored, ref))
		b := []byte(ref)
		for i := range b {
			orig := b[i]
			for c := range 256 {
				if byte(c) == orig {
					continue
				}
				b[i] = byte(c)
				require.False(t, refIs(kind, stored, string(b)), "%q", b)
			}
			b[i] = orig
		}
		for _, other := range []string{ref[:70], ref + "0", string(raw[:]), strings.ToUpper(ref)} {
			assert.False(t, refIs(kind, stored, other), "%q", other)
		}
	}
}

// TestIndexRecordsWithoutRepositoriesOrDuplicatedInBulk: start-up's bulk
// load given records with no repository (a nil or an empty map), records
// whose sizes fill the arena exactly, and the same ref twice (in one
// worker's share and across shares): the index holds the last record of
// each ref, as storing them one by one would.
func TestIndexRecordsWithoutRepositoriesOrDuplicatedInBulk(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	repos := []string{"registry.example/a/app", "registry.example/b/app"}
	many := scaled(2200, 5000) // two start-up workers' shares at least
	for _, tc := range []struct {
		name string
		n    int
		dups [][2]int // (earlier, later) positions holding the same ref
	}{
		{name: "few, no duplicate", n: 10},
		{name: "duplicate in one share", n: 10, dups: [][2]int{{2, 7}}},
		{name: "many, no duplicate", n: many},
		{name: "duplicate across shares", n: many, dups: [][2]int{{1, many - 10}, {many / 2, many/2 + 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := make([]*ImageRecord, tc.n)
			for i := range recs {
				switch i % 4 {
				case 0:
					recs[i] = &ImageRecord{ImageRef: benchRef(i)} // nil map
				case 1:
					recs[i] = &ImageRecord{ImageRef: fmt.Sprintf("raw-%d", i), Repositories: map[string]*RepositoryRecord{}, UnknownOrigin: "seeded"}
				default:
					recs[i] = randomRecord(rng, benchRef(i), repos)
				}
			}
			for _, d := range tc.dups {
				recs[d[1]].ImageRef = recs[d[0]].ImageRef
			}
			model := map[string]*ImageRecord{}
			var refs []string
			total := 0
			for _, r := range recs {
				want := r.clone()
				if want.Repositories == nil {
					want.Repositories = map[string]*RepositoryRecord{}
				}
				if _, seen := model[r.ImageRef]; !seen {
					refs = append(refs, r.ImageRef)
				}
				model[r.ImageRef] = want
				total += groupSize(r)
			}
			x := newRecordIndex()
			x.storeAll(recs)
			checkIndex(t, 0, x, model, refs, repos)
			if len(tc.dups) == 0 {
				tab := x.s.tab.Load()
				assert.Equal(t, total, len(tab.arena), "the arena holds the groups, back to back")
				assert.Equal(t, total, x.s.live)
			}
			// Into a non-empty index, one by one.
			more := []*ImageRecord{randomRecord(rng, recs[0].ImageRef, repos), {ImageRef: "raw-new"}}
			x.storeAll(more)
			model[more[0].ImageRef] = more[0]
			model["raw-new"] = &ImageRecord{ImageRef: "raw-new", Repositories: map[string]*RepositoryRecord{}}
			checkIndex(t, 1, x, model, append(refs, "raw-new"), repos)
		})
	}
}

// FuzzIndexKeys stores two records under arbitrary refs and repository
// names (arbitrary bytes, lengths, near-digests) and checks every look-up
// the decision and the tracker make against a map: a record is found
// under its own key only, and comes back whole.
func FuzzIndexKeys(f *testing.F) {
	refs, repos := adversarialRefs(), adversarialRepos()
	for i := range refs {
		f.Add(refs[i], repos[i%len(repos)], refs[(i+1)%len(refs)], repos[(i+3)%len(repos)], uint8(i), "")
	}
	f.Add("a", "bc", "ab", "c", uint8(3), "reason")
	f.Fuzz(func(t *testing.T, ref1, repo1, ref2, repo2 string, n uint8, reason string) {
		at := time.Unix(1_700_000_000, int64(n)).UTC()
		mk := func(ref, repo string, n int) *ImageRecord {
			r := &ImageRecord{ImageRef: ref, UnknownOrigin: reason, Updated: at, Repositories: map[string]*RepositoryRecord{}}
			if repo != "" || n%2 == 0 {
				rr := &RepositoryRecord{Updated: at}
				for i := range n % 5 {
					rr.Secrets = append(rr.Secrets, SecretEntry{Namespace: repo, Name: ref, UID: reason, Hash: credential.Hash{byte(i), byte(n)}, Verified: at})
				}
				r.Repositories[repo] = rr
			}
			return r
		}
		x := newRecordIndex()
		model := map[string]*ImageRecord{}
		for k, r := range []*ImageRecord{mk(ref1, repo1, int(n)), mk(ref2, repo2, int(n)/5)} {
			if k == int(n)%2 {
				x.storeAll([]*ImageRecord{r})
			} else {
				x.store(r)
			}
			model[r.ImageRef] = r
		}
		probeRefs := []string{ref1, ref2, ref1 + ref2, strings.ToUpper(ref1)}
		probeRepos := []string{repo1, repo2, repo1 + repo2}
		for _, ref := range probeRefs {
			require.Equal(t, model[ref], x.load(ref), "load(%q)", ref)
			for _, repo := range probeRepos {
				v, ok := x.loadRepository(ref, repo)
				var want *RepositoryRecord
				if r := model[ref]; r != nil && repo != "" {
					want = r.Repositories[repo]
				}
				require.Equal(t, want != nil, ok, "loadRepository(%q, %q)", ref, repo)
				if ok {
					require.Equal(t, want, v.record())
				}
			}
		}
		x.delete(ref1)
		delete(model, ref1)
		for _, ref := range probeRefs {
			require.Equal(t, model[ref], x.load(ref), "after delete: load(%q)", ref)
		}
	})
}
