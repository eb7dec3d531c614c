package credtracker

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
)

// versionedRef is a ref the writer changes and the readers check: seq is
// odd while a write of it is under way and counts writes; ver is the
// version its last completed write stored (0: deleted or never stored).
type versionedRef struct {
	ref string
	seq atomic.Uint64
	ver atomic.Int64
}

var churnRepos = []string{"registry.example/a/app", "registry.example/b/app", "registry.example/c/app"}

// versioned is version v of the i-th churned record: every field says v,
// so that a reader can tell a whole record of one version from a torn
// one. Some versions are large, so that the arena grows (by copy) and is
// compacted while readers read.
func versioned(ref string, i int, v int64) *ImageRecord {
	at := time.Unix(v, 0).UTC()
	r := &ImageRecord{ImageRef: ref, Updated: at, Repositories: map[string]*RepositoryRecord{}}
	if v%7 == 0 {
		r.UnknownOrigin = fmt.Sprintf("%d:", v) + strings.Repeat("o", 20000)
	}
	for k := range 1 + int(v%3) {
		rr := &RepositoryRecord{NodeAccessible: v%5 == 0 && k > 0, Updated: at.Add(time.Duration(k))}
		if !rr.NodeAccessible {
			for s := range int(v % 4) {
				var h credential.Hash
				h[0], h[1], h[2] = byte(i), byte(k), byte(s)
				binary.LittleEndian.PutUint64(h[8:], uint64(v))
				rr.Secrets = append(rr.Secrets, SecretEntry{Namespace: fmt.Sprintf("ns-%d", v), Name: fmt.Sprintf("s-%d", s), UID: fmt.Sprintf("%d-%d-%d", i, v, s), Hash: h, Verified: at})
			}
			for s := range int(v % 3) {
				rr.ServiceAccounts = append(rr.ServiceAccounts, ServiceAccountEntry{Namespace: fmt.Sprintf("ns-%d", v), Name: "sa", UID: fmt.Sprintf("sa-%d", s), Verified: at})
			}
		}
		r.Repositories[churnRepos[k]] = rr
	}
	return r
}

// TestIndexReadsAreLinearizable runs lock-free readers against a writer
// that replaces, deletes, adds (one by one and in bulk) records, which
// grows the table, reallocates the arena and compacts it. A reader's
// look-up that no write of its ref overlapped must return exactly the
// last version written, or nothing if it was deleted: a miss for a record
// that exists would make its image look preloaded, a hit for a deleted
// one would admit with forgotten credentials. Any hit, overlapped or not,
// must be one whole version of the record, never parts of two. Refs never
// stored are never found.
func TestIndexReadsAreLinearizable(t *testing.T) {
	const nRefs = 384
	ops := scaled(3000, 30000)
	if raceEnabled {
		ops /= 5
	}
	x := newRecordIndex()
	refs := make([]*versionedRef, nRefs)
	var initial []*ImageRecord
	for i := range refs {
		refs[i] = &versionedRef{ref: benchRef(i)}
		if i%2 == 1 {
			refs[i].ref = fmt.Sprintf("registry.example/raw@%d", i) // not a digest
		}
		if i < nRefs/4 {
			initial = append(initial, versioned(refs[i].ref, i, 1))
			refs[i].ver.Store(1)
		}
	}
	x.storeAll(initial)

	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	fail := func(format string, args ...any) {
		select {
		case errs <- fmt.Sprintf(format, args...):
		default:
		}
		done.Store(true)
	}
	var checks, strict atomic.Int64
	for g := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			for !done.Load() {
				i := rng.IntN(nRefs)
				vr := refs[i]
				s1 := vr.seq.Load()
				want := vr.ver.Load()
				var got int64
				var found bool
				if rng.IntN(2) == 0 {
					v, ok := x.loadRepository(vr.ref, churnRepos[0])
					if found = ok; ok {
						got = fromUnixNano(v.updated()).Unix()
						if w := versioned(vr.ref, i, got).Repositories[churnRepos[0]]; !assert.ObjectsAreEqual(w, v.record()) {
							fail("entry of %s (version %d) is torn: %+v", vr.ref, got, v.record())
							return
						}
					}
				} else {
					r := x.load(vr.ref)
					if found = r != nil; found {
						got = r.Updated.Unix()
						if w := versioned(vr.ref, i, got); !assert.ObjectsAreEqual(w, r) {
							fail("record of %s (version %d) is torn", vr.ref, got)
							return
						}
					}
				}
				checks.Add(1)
				if s2 := vr.seq.Load(); s1 == s2 && s1%2 == 0 {
					strict.Add(1)
					if found != (want != 0) || found && got != want {
						fail("%s: found=%v version %d, but version %d was stored (0: deleted) and no write overlapped", vr.ref, found, got, want)
						return
					}
				}
				if _, ok := x.loadRepository(fmt.Sprintf("sha256:%064x", 1<<40+i), churnRepos[0]); ok {
					fail("a ref never stored was found")
					return
				}
			}
		})
	}

	rng := rand.New(rand.NewPCG(7, 7))
	next := int64(2)
	begin := func(vrs ...*versionedRef) {
		for _, vr := range vrs {
			vr.seq.Add(1)
		}
	}
	end := func(vrs []*versionedRef, vers []int64) {
		for k, vr := range vrs {
			vr.ver.Store(vers[k])
			vr.seq.Add(1)
		}
	}
	for op := 0; op < ops && !done.Load(); op++ {
		switch k := rng.IntN(10); {
		case k < 6:
			i := rng.IntN(nRefs)
			begin(refs[i])
			x.store(versioned(refs[i].ref, i, next))
			end(refs[i:i+1], []int64{next})
			next++
		case k < 8:
			i := rng.IntN(nRefs)
			begin(refs[i])
			x.delete(refs[i].ref)
			end(refs[i:i+1], []int64{0})
		default:
			var batch []*ImageRecord
			var vrs []*versionedRef
			var vers []int64
			seen := map[int]bool{}
			for range 1 + rng.IntN(8) {
				i := rng.IntN(nRefs)
				if seen[i] {
					continue
				}
				seen[i] = true
				batch = append(batch, versioned(refs[i].ref, i, next))
				vrs, vers = append(vrs, refs[i]), append(vers, next)
				next++
			}
			begin(vrs...)
			x.storeAll(batch)
			end(vrs, vers)
		}
	}
	done.Store(true)
	wg.Wait()
	select {
	case msg := <-errs:
		t.Fatal(msg)
	default:
	}
	require.Positive(t, strict.Load(), "no look-up ran without a write of its ref")
	t.Logf("%d look-ups, %d strict; %d records, arena %d bytes, %d slots", checks.Load(), strict.Load(), x.len(), len(x.s.tab.Load().arena), len(x.s.tab.Load().slots))
}

// TestDecideNeverTakesARecordedImageForPreloadedUnderChurn: tenant A
// pulled a private image; while other images are recorded, replaced and
// pruned (growing, reallocating and compacting the index), and A's record
// itself is rewritten, tenant B's pod, which has no credential for it,
// asks for it again and again (while the tracker prunes and forgets). It must be refused every time: a single
// miss would take the image for a preloaded one and admit B.
func TestDecideNeverTakesARecordedImageForPreloadedUnderChurn(t *testing.T) {
	trI, err := New(context.Background(), Config{Dir: t.TempDir()}, nil, WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	tr := trI.(*tracker)
	t.Cleanup(func() { tr.Close() })
	const image = "registry.example/tenant-a/private:v1"
	ref := benchRef(1 << 20)
	credA, credB := benchCred(tr.hasher, 1), benchCred(tr.hasher, 2)
	require.NoError(t, tr.RecordImagePulled(image, ref, credA))
	mine := tr.images.load(ref)
	reqB := Request{Image: image, ImageRef: ref, Names: []string{image}, PullPolicy: corev1.PullIfNotPresent,
		Credentials: func() []credential.Credential { return []credential.Credential{credB} }}
	require.Equal(t, Decision{Action: Pull, Reason: ReasonNoMatch}, tr.Decide(reqB))

	var done atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Pointer[Decision]
	var decisions atomic.Int64
	for range 2 {
		wg.Go(func() {
			for !done.Load() {
				if d := tr.Decide(reqB); d.Action != Pull {
					bad.Store(&d)
					done.Store(true)
				}
				decisions.Add(1)
			}
		})
	}
	rng := rand.New(rand.NewPCG(11, 12))
	ops := scaled(2000, 20000)
	if raceEnabled {
		ops /= 5
	}
	for op := 0; op < ops && !done.Load(); op++ {
		tr.writeMu.Lock()
		switch k := rng.IntN(10); {
		case k < 5:
			i := rng.IntN(2000)
			tr.images.store(versioned(benchRef(i), i, int64(op+1)))
		case k < 7:
			tr.images.delete(benchRef(rng.IntN(2000)))
		case k < 8:
			var batch []*ImageRecord
			for range 16 {
				i := rng.IntN(2000)
				batch = append(batch, versioned(benchRef(i), i, int64(op+1)))
			}
			tr.images.storeAll(batch)
		default:
			tr.images.store(mine.clone()) // the same content, at a new place
		}
		tr.writeMu.Unlock()
		if op%200 == 199 {
			// The tracker's own bulk writers: every other record pruned,
			// every record walked and unrelated entries forgotten.
			_, err := tr.PruneImages([]Image{{Ref: ref, Names: []string{image}}}, time.Now())
			require.NoError(t, err)
			require.NoError(t, tr.ForgetNamespace("tenant-x"))
		}
	}
	done.Store(true)
	wg.Wait()
	if d := bad.Load(); d != nil {
		t.Fatalf("tenant B was given %+v", *d)
	}
	t.Logf("%d decisions", decisions.Load())
	assert.Equal(t, Decision{Action: UseImage, Reason: ReasonCredentialMatch}, tr.Decide(Request{Image: image, ImageRef: ref, Names: []string{image}, PullPolicy: corev1.PullIfNotPresent,
		Credentials: func() []credential.Credential { return []credential.Credential{credA} }}))
}

// pausedProbe sets up a table in which the probe sequence of (R, repo)
// reads, in order: a deleted slot, a slot with the same tag that points
// at another record's entry (a tag collision, which makes the reader call
// its match function before it reaches R's entry), and R's entry. It
// returns the index and R.
func pausedProbe(t *testing.T) (*recordIndex, *ImageRecord, string) {
	t.Helper()
	const repoD, repoR = "registry.example/d/app", "registry.example/r/app"
	at := time.Unix(1_700_000_000, 0).UTC()
	d := &ImageRecord{ImageRef: benchRef(1), Updated: at, Repositories: map[string]*RepositoryRecord{repoD: {NodeAccessible: true, Updated: at}}}
	r := &ImageRecord{ImageRef: benchRef(2), Updated: at, Repositories: map[string]*RepositoryRecord{repoR: {Updated: at,
		Secrets: []SecretEntry{{Namespace: "a", Name: "s", UID: "u", Hash: credential.Hash{1}, Verified: at}}}}}
	x := newRecordIndex()
	x.store(d)
	x.store(r)
	s := &x.s
	old := s.tab.Load()
	offOf := func(ref, repo string) int {
		sl := old.slots
		if repo == "" {
			sl = old.gslots
		}
		for i := range sl {
			v := sl[i].Load()
			if v == slotEmpty || uint32(v) == offTombstone {
				continue
			}
			off := int(uint32(v)) - 1
			if repo == "" && groupIs(old.arena, off, ref) {
				return off
			}
			if _, ok := entryIs(old, off, ref, repo); repo != "" && ok {
				return off
			}
		}
		t.Fatalf("no slot for (%s, %s)", ref, repo)
		return -1
	}
	hd, hr := maphash.String(x.seed, d.ImageRef), maphash.String(x.seed, r.ImageRef)
	hp := x.pairHash(hr, repoR)
	const n = 1024
	nt := &table{slots: newSlots(n), gslots: newSlots(n), arena: old.arena, coords: old.coords}
	h0 := home(hp, n)
	nt.slots[h0].Store(hp&^(1<<32-1) | offTombstone)
	nt.slots[(h0+1)%n].Store(slotValue(hp, offOf(d.ImageRef, repoD))) // R's tag, D's entry
	nt.slots[(h0+2)%n].Store(slotValue(hp, offOf(r.ImageRef, repoR)))
	s.e, s.g = slotCounts{used: 3, entries: 1}, slotCounts{}
	insert(&s.g, nt.gslots, x.pairHash(hr, ""), offOf(r.ImageRef, ""))
	insert(&s.g, nt.gslots, x.pairHash(hd, ""), offOf(d.ImageRef, ""))
	insert(&s.e, nt.slots, x.pairHash(hd, repoD), offOf(d.ImageRef, repoD))
	s.tab.Store(nt)
	_, ok := x.loadRepository(d.ImageRef, repoD)
	require.True(t, ok)
	v, ok := x.loadRepository(r.ImageRef, repoR)
	require.True(t, ok)
	require.Equal(t, r.Repositories[repoR], v.record())
	return x, r, repoR
}

// TestIndexReaderOvertakenByAReplaceDoesNotMiss is the interleaving a
// stress test can hardly hit, made deterministic: a reader has passed a
// deleted slot of its probe sequence and is comparing a colliding entry
// when the writer replaces the record it looks for; the new entry takes
// the deleted slot behind the reader, the old one ahead of it is deleted.
// The reader's probe alone sees neither: the index must notice the write
// and look again, or the record (here, a secret's proof) would be missed
// and its image taken for a preloaded one.
func TestIndexReaderOvertakenByAReplaceDoesNotMiss(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(x *recordIndex, r *ImageRecord)
	}{
		{name: "replace", write: func(x *recordIndex, r *ImageRecord) { x.store(r) }},
		{name: "replace in bulk", write: func(x *recordIndex, r *ImageRecord) { x.storeAll([]*ImageRecord{r}) }},
		{name: "replace, then grow and compact", write: func(x *recordIndex, r *ImageRecord) {
			x.store(r)
			for i := range 2000 {
				x.store(&ImageRecord{ImageRef: benchRef(100 + i), UnknownOrigin: strings.Repeat("g", 100)})
				x.delete(benchRef(100 + i))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, r, repo := pausedProbe(t)
			next := r.clone()
			next.Repositories[repo].Secrets[0].Hash = credential.Hash{2}
			calls := 0
			var got repoView
			found := x.probe(r.ImageRef, repo, false, func(tab *table, off int) bool {
				if calls++; calls == 1 {
					tc.write(x, next) // between the reader's slot loads
				}
				v, ok := entryIs(tab, off, r.ImageRef, repo)
				got = v
				return ok
			}) != nil
			require.Positive(t, calls, "the reader did not pause at the colliding slot")
			require.True(t, found, "the reader missed a record that existed throughout")
			assert.Equal(t, next.Repositories[repo], got.record())
		})
	}
}

// TestIndexReaderOvertakenByADeleteDoesNotFindIt: the same paused reader,
// overtaken by the record's deletion (a pruned image, say), finds
// nothing: the deleted entry is not handed out once the delete is done.
func TestIndexReaderOvertakenByADeleteDoesNotFindIt(t *testing.T) {
	x, r, repo := pausedProbe(t)
	calls := 0
	found := x.probe(r.ImageRef, repo, false, func(tab *table, off int) bool {
		if calls++; calls == 1 {
			x.delete(r.ImageRef)
		}
		_, ok := entryIs(tab, off, r.ImageRef, repo)
		return ok
	}) != nil
	require.Positive(t, calls)
	assert.False(t, found, "a record deleted before the reader reached it was found")
	_, ok := x.loadRepository(r.ImageRef, repo)
	assert.False(t, ok)
}
