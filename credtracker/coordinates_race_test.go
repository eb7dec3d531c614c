package credtracker

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
)

// sharedTriple is listed by every version of every churned record (a
// tenant's pull secret listed by every image it pulled): it stays in the
// names arena while the triples around it come and go.
var sharedTriple = coordTriple{"tenant-shared", "regcred", "shared-uid"}

// coordsOf is the triple of secret (sa false) or service account (sa true)
// k of version v of record i: every field says i, v and k, and its length
// changes with v (across the uvarint's one- and two-byte lengths), so that
// a triple read at a wrong offset, from a wrong arena or torn is another
// version's or another record's.
func coordsOf(i int, v int64, k int, sa bool) coordTriple {
	if k == 0 {
		return sharedTriple
	}
	kind := "s"
	if sa {
		kind = "sa"
	}
	pad := strings.Repeat("p", int(v*37%300))
	return coordTriple{fmt.Sprintf("ns-%d-%d", i, v) + pad, fmt.Sprintf("%s-%d-%d-%d", kind, i, v, k), fmt.Sprintf("%d/%d/%d", i, v, k)}
}

// coordsVersion is version v (> 0) of record i, in whose every entry the
// updated time says v.
func coordsVersion(i int, v int64) *ImageRecord {
	at := time.Unix(v, 0).UTC()
	r := &ImageRecord{ImageRef: benchRef(i), Updated: at, Repositories: map[string]*RepositoryRecord{}}
	for k := range 1 + int(v%3) {
		rr := &RepositoryRecord{Updated: at}
		for s := range 1 + int(v%4) {
			c := coordsOf(i, v, s, false)
			var h credential.Hash
			binary.LittleEndian.PutUint64(h[:], uint64(v))
			h[8] = byte(s)
			rr.Secrets = append(rr.Secrets, SecretEntry{Namespace: c.ns, Name: c.name, UID: c.uid, Hash: h, Verified: at})
		}
		for s := range 1 + int(v%3) {
			c := coordsOf(i, v, s, true)
			rr.ServiceAccounts = append(rr.ServiceAccounts, ServiceAccountEntry{Namespace: c.ns, Name: c.name, UID: c.uid, Verified: at})
		}
		r.Repositories[churnRepos[k]] = rr
	}
	return r
}

// checkEntryCoords checks an entry of record i read without a lock: its
// version is the one its updated time says, and its coordinates, and what
// the look-ups find, are that version's and no other's.
func checkEntryCoords(i int, v repoView) error {
	ver := fromUnixNano(v.updated()).Unix()
	if ver <= 0 {
		return fmt.Errorf("record %d: entry of version %d", i, ver)
	}
	if got, want := v.secrets(), 1+int(ver%4); got != want {
		return fmt.Errorf("record %d version %d: %d secrets, want %d", i, ver, got, want)
	}
	if got, want := v.serviceAccounts(), 1+int(ver%3); got != want {
		return fmt.Errorf("record %d version %d: %d service accounts, want %d", i, ver, got, want)
	}
	var err error
	v.eachCoords(func(k int, sa bool, ns, name, uid []byte) bool {
		if got, want := (coordTriple{string(ns), string(name), string(uid)}), coordsOf(i, ver, k, sa); got != want {
			err = fmt.Errorf("record %d version %d: coordinates %d (sa %v) read as %.60q, want %.60q", i, ver, k, sa, got, want)
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	for k := range v.secrets() {
		c := coordsOf(i, ver, k, false)
		if !v.findSecret(c.source(credential.SourceSecret), func(j int) bool { return j == k }) {
			return fmt.Errorf("record %d version %d: secret %d not found at its coordinates", i, ver, k)
		}
		if v.findServiceAccount(c.source(credential.SourceServiceAccount), func(int) bool { return true }) && k > 0 {
			return fmt.Errorf("record %d version %d: secret %d's coordinates found as a service account", i, ver, k)
		}
	}
	// Another version's and another record's coordinates are not listed.
	for _, c := range []coordTriple{coordsOf(i, ver+1, 1, false), coordsOf(i, ver-1, 1, false), coordsOf(i+1, ver, 1, false)} {
		if v.findSecret(c.source(credential.SourceSecret), func(int) bool { return true }) {
			return fmt.Errorf("record %d version %d: found a secret at %.60q", i, ver, c)
		}
	}
	return nil
}

// TestIndexCoordinatesUnderConcurrentWrites: lock-free readers look
// entries up and read their coordinates (as the rotated secret's and the
// service account's match do) while a writer replaces and deletes
// records, stores them in bulk, forces rebuilds of the table and its
// names arena, and reinstalls everything through start-up parts. Every
// entry a reader finds must list exactly its own version's coordinates.
func TestIndexCoordinatesUnderConcurrentWrites(t *testing.T) {
	const nRecs = 64
	ops := scaled(1500, 6000)
	if raceEnabled {
		ops /= 4
	}
	x := newRecordIndex()
	var cur atomic.Pointer[recordIndex] // the index readers read (a reinstall makes a new one)
	cur.Store(x)
	ver := make([]int64, nRecs)
	for i := range nRecs {
		ver[i] = 1
		x.store(coordsVersion(i, 1))
	}
	var done atomic.Bool
	var reads, hits atomic.Int64
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for !done.Load() {
				i := rng.IntN(nRecs)
				v, ok := cur.Load().loadRepository(benchRef(i), churnRepos[rng.IntN(len(churnRepos))])
				reads.Add(1)
				if !ok {
					continue
				}
				hits.Add(1)
				if err := checkEntryCoords(i, v); err != nil {
					errs <- err
					done.Store(true)
					return
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(3, 4))
	next := int64(2)
	for op := 0; op < ops && !done.Load(); op++ {
		switch k := rng.IntN(40); {
		case k < 28:
			i := rng.IntN(nRecs)
			ver[i] = next
			x.store(coordsVersion(i, next))
		case k < 32:
			i := rng.IntN(nRecs)
			ver[i] = 0
			x.delete(benchRef(i))
		case k < 36:
			var batch []*ImageRecord
			for range 8 {
				i := rng.IntN(nRecs)
				ver[i] = next
				batch = append(batch, coordsVersion(i, next))
			}
			x.storeAll(batch)
		case k < 39:
			forceRebuild(x)
		default:
			var recs []*ImageRecord
			for i, v := range ver {
				if v > 0 {
					recs = append(recs, coordsVersion(i, v))
				}
			}
			x = installParts(t, rng, recs, 1+rng.IntN(3))
			cur.Store(x)
		}
		next++
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d reads, %d hits", reads.Load(), hits.Load())
	require.Positive(t, hits.Load(), "the readers found entries")
	// The last state, read back whole.
	for i, v := range ver {
		if v == 0 {
			require.Nil(t, x.load(benchRef(i)))
		} else {
			require.Equal(t, coordsVersion(i, v), x.load(benchRef(i)))
		}
	}
}
