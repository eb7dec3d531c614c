package credtracker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
)

// TestCoordinatesHashCollisionOnlySkipsRemembering: the keyed 32-bit
// hash of a secret's coordinates lets a decision skip remembering them.
// Made to collide (the stored hash of A's secret set to that of B's
// coordinates), it must never grant B anything: B's secret with other
// content is refused, B's secret with the accepted content is admitted
// by that content alone, and its coordinates are then not remembered, so
// that a later rotation of B's secret is refused, not honoured.
func TestCoordinatesHashCollisionOnlySkipsRemembering(t *testing.T) {
	trI, err := New(context.Background(), Config{Dir: t.TempDir()}, nil, WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	tr := trI.(*tracker)
	t.Cleanup(func() { tr.Close() })
	const image = "registry.example/tenant-a/private:v1"
	repo, err := RepositoryName(image)
	require.NoError(t, err)
	ref := benchRef(3)
	credA := benchCred(tr.hasher, 1)
	require.NoError(t, tr.RecordImagePulled(image, ref, credA))

	srcB := credential.Source{Kind: credential.SourceSecret, Namespace: "tenant-b", Name: "copy", UID: "b-uid"}
	rv, ok := tr.images.loadRepository(ref, repo)
	require.True(t, ok)
	require.Equal(t, 1, rv.secrets())
	require.False(t, rv.mayListSecret(tr.images.seed, srcB))
	// The collision, in place (no reader runs yet).
	binary.LittleEndian.PutUint32(rv.b[rv.sec+40:], coordsHash(tr.images.seed, srcB.Namespace, srcB.Name, srcB.UID))
	require.True(t, rv.mayListSecret(tr.images.seed, srcB))
	before := tr.images.load(ref)

	ask := func(h credential.Hash) Decision {
		return tr.Decide(Request{Image: image, ImageRef: ref, Names: []string{image}, PullPolicy: corev1.PullIfNotPresent,
			Credentials: func() []credential.Credential {
				return []credential.Credential{{Registry: "registry.example", Source: srcB, Hash: h}}
			}})
	}
	other := tr.hasher.Hash("registry.example", credential.AuthConfig{Username: "b", Password: "other"})
	assert.Equal(t, Decision{Action: Pull, Reason: ReasonNoMatch}, ask(other), "B's own content, with A's coordinates hash")
	assert.Equal(t, Decision{Action: UseImage, Reason: ReasonCredentialMatch}, ask(credA.Hash), "B holds the accepted content")
	assert.Equal(t, before, tr.images.load(ref), "the collision skipped remembering B's coordinates")
	rotated := tr.hasher.Hash("registry.example", credential.AuthConfig{Username: "b", Password: "rotated"})
	assert.Equal(t, Decision{Action: Pull, Reason: ReasonNoMatch}, ask(rotated), "B's rotated secret is not honoured")

	// Without the collision, the same sequence remembers B and honours its rotation.
	binary.LittleEndian.PutUint32(rv.b[rv.sec+40:], coordsHash(tr.images.seed, credA.Source.Namespace, credA.Source.Name, credA.Source.UID))
	assert.Equal(t, Decision{Action: UseImage, Reason: ReasonCredentialMatch}, ask(credA.Hash))
	assert.Equal(t, Decision{Action: UseImage, Reason: ReasonSecretRotated}, ask(rotated))
}

// TestHugeRangeAdvisesOnlyTheBufferInterior: the huge-page advice covers
// whole 2 MiB pages inside the buffer (from its first byte to the end of
// its capacity) and nothing else, whatever the buffer's size and
// alignment (sub-slices of a larger buffer, slot tables); a refused
// advice is ignored.
func TestHugeRangeAdvisesOnlyTheBufferInterior(t *testing.T) {
	big := make([]byte, 0, 5*hugePageSize+12345)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{name: "too small", b: make([]byte, hugeMinSize-1)},
		{name: "smallest advised", b: make([]byte, 0, hugeMinSize)},
		{name: "whole", b: big},
		{name: "offset by one", b: big[1:1]},
		{name: "offset by a page and a byte", b: big[hugePageSize+1 : hugePageSize+1]},
		{name: "length below capacity", b: big[:7]},
		{name: "slots", b: slotBytes(make([]atomic.Uint64, hugeMinSize/8+3))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := tc.b[:cap(tc.b)]
			var lo, hi uintptr
			if len(full) > 0 {
				lo = uintptr(unsafe.Pointer(unsafe.SliceData(full)))
				hi = lo + uintptr(len(full))
			}
			var advised [][]byte
			hugeRange(tc.b, func(r []byte) error { advised = append(advised, r); return nil })
			wantN := 0
			if cap(tc.b) >= hugeMinSize {
				first := (lo + hugePageSize - 1) &^ (hugePageSize - 1)
				last := hi &^ (hugePageSize - 1)
				if last > first {
					wantN = int(last - first)
				}
			}
			got := 0
			for _, r := range advised {
				p := uintptr(unsafe.Pointer(unsafe.SliceData(r)))
				assert.Zero(t, p%hugePageSize, "start aligned")
				assert.Zero(t, len(r)%hugePageSize, "whole pages")
				assert.GreaterOrEqual(t, p, lo)
				assert.LessOrEqual(t, p+uintptr(len(r)), hi)
				got += len(r)
			}
			assert.Equal(t, wantN, got, "the whole aligned interior, once")
			hugeRange(tc.b, func([]byte) error { return errors.New("refused") }) // ignored
		})
	}
}

// TestHugePagesKeepTheBuffersContents: advising and collapsing (for
// real, where the kernel supports it) leaves every byte of an arena and
// every slot as written, and growing an arena by copy keeps its bytes.
func TestHugePagesKeepTheBuffersContents(t *testing.T) {
	const n = 3*hugePageSize + 4097
	a := newArena(n)[:n]
	for i := range a {
		a[i] = byte(i*7 + i>>11)
	}
	collapseHuge(a)
	g := growArena(a, 2*hugePageSize)
	require.Equal(t, len(a), len(g))
	require.GreaterOrEqual(t, cap(g)-len(g), 2*hugePageSize)
	for i := range g {
		if a[i] != byte(i*7+i>>11) || g[i] != a[i] {
			t.Fatalf("byte %d changed", i)
		}
	}
	s := newSlots(hugeMinSize / 8 * 2)
	for i := range s {
		s[i].Store(uint64(i) * 0x9e3779b97f4a7c15)
	}
	tab := &table{slots: s, arena: g}
	tab.collapse()
	for i := range s {
		if s[i].Load() != uint64(i)*0x9e3779b97f4a7c15 {
			t.Fatalf("slot %d changed", i)
		}
	}
}

// TestIndexReadersDoNotWaitForARebuild: a rebuild (table growth,
// compaction) and an arena's copy are O(n) — about 50 ms at 100 000
// records, longer when the kernel must compact memory to collapse huge
// pages — and change no record. Readers must not wait for them: a
// look-up that finds nothing (every decision for an image the node did
// not pull, preloaded ones included) is trusted only while the index is
// not marked as changing, so marking it during that work would stall
// those decisions for its whole length. Meanwhile, look-ups answer right.
func TestIndexReadersDoNotWaitForARebuild(t *testing.T) {
	const repo = "registry.example/a/app"
	x := newRecordIndex()
	stable := &ImageRecord{ImageRef: benchRef(0), Repositories: map[string]*RepositoryRecord{repo: {NodeAccessible: true}}}
	x.store(stable)
	slow, marked := 0, 0
	x.slowHook = func() {
		slow++
		if x.s.ver.Load()&1 != 0 {
			marked++
			return // a look-up would wait for this very goroutine
		}
		_, ok := x.loadRepository(benchRef(1<<30), repo)
		assert.False(t, ok, "a ref never stored")
		v, ok := x.loadRepository(stable.ImageRef, repo)
		if assert.True(t, ok, "a stored record") {
			assert.True(t, v.nodeAccessible())
		}
	}
	for i := range 3000 { // grows the table and the arena, and compacts
		x.store(&ImageRecord{ImageRef: benchRef(1 + i%500), UnknownOrigin: fmt.Sprint(i), Repositories: map[string]*RepositoryRecord{repo: {}}})
		if i%3 == 0 {
			x.delete(benchRef(1 + (i/3)%500))
		}
	}
	require.Positive(t, slow, "no rebuild or arena copy happened")
	assert.Zero(t, marked, "of %d rebuilds and arena copies, %d held readers off", slow, marked)
}
