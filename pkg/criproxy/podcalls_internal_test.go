package criproxy

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/pullguard/pullguard/pkg/credential"
)

// TestWindowKeepsNoHugeStatus: a tenant can give one image thousands of
// names (its registry serves one manifest under many tags, its pods pull
// them all), and every pod's presence check of any of them opens a window
// of its own. A window must not keep a copy of such a name list (10 000
// windows of 20 000 names would be gigabytes); the pull that follows asks
// the runtime again instead.
func TestWindowKeepsNoHugeStatus(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		names    int
		wantKept bool
	}{
		{names: 2, wantKept: true},
		{names: maxKeptNames, wantKept: true},
		{names: maxKeptNames + 1, wantKept: false},
		{names: 20000, wantKept: false},
	} {
		t.Run(fmt.Sprint(tc.names), func(t *testing.T) {
			p := newPodCalls(DefaultAnswerWindow, maxWindows)
			names := make([]string, tc.names)
			for i := range names {
				names[i] = fmt.Sprintf("reg.example.com/t/app:v%d", i)
			}
			p.hid("reg.example.com/t/app:v0", "pod", now, "sha256:1", names)
			ok, id, kept := p.take("reg.example.com/t/app:v0", "pod", now)
			assert.True(t, ok, "the window is open either way")
			if tc.wantKept {
				assert.Equal(t, "sha256:1", id)
				assert.Len(t, kept, tc.names)
			} else {
				assert.Empty(t, id, "no status kept: the pull asks the runtime")
				assert.Nil(t, kept)
			}
		})
	}
}

// TestFinestClockStep: the measure serve takes of the wall clock at its
// start is a positive duration (on this machine's nanosecond clock, tens
// of nanoseconds; on a jiffies clock, a tick).
func TestFinestClockStep(t *testing.T) {
	step := finestClockStep()
	assert.Positive(t, step)
	assert.Less(t, step, time.Second)
}

// TestRecent: a full map makes room for a new key by forgetting its least
// recent entry (put and get make an entry the most recent, peek does
// not), and says which; a key put again is no new entry. Each case acts on
// a full map of a, b and c (put in that order), then puts d.
func TestRecent(t *testing.T) {
	for _, tc := range []struct {
		name        string
		before      func(t *testing.T, r *recent[string, int]) // before d is put
		wantKeys    []string                                   // left, in any order
		wantEvicted []string
	}{
		{name: "oldest put goes first", before: func(*testing.T, *recent[string, int]) {},
			wantKeys: []string{"b", "c", "d"}, wantEvicted: []string{"a"}},
		{name: "get makes an entry the most recent", before: func(_ *testing.T, r *recent[string, int]) { r.get("a") },
			wantKeys: []string{"a", "c", "d"}, wantEvicted: []string{"b"}},
		{name: "peek leaves an entry in its place", before: func(_ *testing.T, r *recent[string, int]) {
			if v, ok := r.peek("a"); ok {
				*v = 10 // changed in place
			}
		}, wantKeys: []string{"b", "c", "d"}, wantEvicted: []string{"a"}},
		{name: "put again renews, adds nothing", before: func(t *testing.T, r *recent[string, int]) {
			_, evicted, added := r.put("a", 5)
			assert.False(t, evicted || added, "a key put again")
		}, wantKeys: []string{"a", "c", "d"}, wantEvicted: []string{"b"}},
		{name: "remove makes room without evicting", before: func(_ *testing.T, r *recent[string, int]) {
			r.remove("b")
			r.remove("x")
		}, wantKeys: []string{"a", "c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecent[string, int](3)
			for i, k := range []string{"a", "b", "c"} {
				r.put(k, i)
			}
			tc.before(t, r)
			var evicted []string
			if old, ok, _ := r.put("d", 4); ok {
				evicted = append(evicted, old.key)
			}
			assert.Equal(t, tc.wantEvicted, evicted)
			var keys []string
			for k := range r.at {
				keys = append(keys, k)
			}
			assert.ElementsMatch(t, tc.wantKeys, keys)
			assert.Equal(t, len(tc.wantKeys), r.order.Len(), "the list and the map agree")
			for e := r.order.Front(); e != nil; e = e.Next() {
				k := entryOf[string, int](e).key
				assert.Same(t, e, r.at[k], "%s: the map points at its element", k)
			}
		})
	}
}

// TestPodCallsStayBounded: a long flood (eight times the bound) of new
// pods, each with an image name of its own, opening windows that no pull
// closes and proving pulls (every 1000th pull another sandbox's, under a
// key already proven: a collision), leaves every map within its bound, the
// owners in step with the proofs, and the heap flat once the maps are
// full (the maps' tables reach their size by the fourth round).
func TestPodCallsStayBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := newPodCalls(DefaultAnswerWindow, maxWindows)
	evicted := map[string]int{}
	p.onEvict = func(kind string) { evicted[kind]++ }
	cred := credential.Credential{Registry: "reg.example.com", Hash: credential.Hash{7}}
	n := 0
	round := func() {
		for range maxWindows {
			n++
			image, pod := fmt.Sprintf("reg.example.com/t/app-%d:v1", n), fmt.Sprintf("api\x00%d\x00", n)
			id := fmt.Sprintf("sha256:%064x", n)
			p.hid(image, "never"+pod, now, id, []string{image})
			p.hid(image, pod, now, id, []string{image})
			uid := pod
			if n%1000 == 0 {
				p.proved(image, pod, uid, id, cred)
				uid = "another sandbox"
			}
			p.proved(image, pod, uid, id, cred)
			now = now.Add(time.Millisecond)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var heaps []uint64
	for range 8 {
		round()
		heaps = append(heaps, heap())
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	for _, tc := range []struct {
		name  string
		len   int
		bound int
	}{
		{"windows", p.open.len(), maxWindows},
		{"proofs", p.proofs.len(), maxProofs},
		{"owners", len(p.owners), maxProofs},
		{"collisions", p.collided.len(), maxWindows},
		{"memo", p.keys.len(), maxWindows},
	} {
		assert.LessOrEqual(t, tc.len, tc.bound, tc.name)
		assert.Positive(t, tc.len, tc.name)
	}
	counted := 0
	for pod, o := range p.owners {
		assert.Positive(t, o.proofs, "an owner without proofs: %q", pod)
		counted += o.proofs
	}
	assert.Equal(t, p.proofs.len(), counted, "the owners count every proof")
	// Each pod's window is closed by its pull; the other pod's stays.
	assert.Equal(t, n*2-n-p.open.len(), evicted[evictedWindow], "every window past the bound made room (none had expired)")
	assert.Equal(t, n*2-p.proofs.len(), evicted[evictedProof], "proofs kept: 2 a pull (a collision's pulls prove one key)")
	assert.Equal(t, n-maxWindows, evicted[evictedName], "a name a pod")
	assert.Zero(t, evicted[evictedCollision], "80 collisions")
	assert.Less(t, float64(heaps[7]), float64(heaps[4])*1.02, "the heap after the eighth round against the fifth")
	assert.Less(t, heaps[7], uint64(64<<20), "the heap after the flood")
	t.Logf("heap after each round %v bytes; evicted %v", heaps, evicted)
}
