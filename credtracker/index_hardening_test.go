package credtracker

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

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
	require.False(t, rv.mayListSecret(tr.images.seed, &srcB))
	// The collision, in place (no reader runs yet).
	binary.LittleEndian.PutUint32(rv.b[rv.sec+40:], coordsHash(tr.images.seed, srcB.Namespace, srcB.Name, srcB.UID))
	require.True(t, rv.mayListSecret(tr.images.seed, &srcB))
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

// TestIndexReadersDoNotWaitForARebuild: a rebuild (table growth,
// compaction) and an arena's copy are O(n) — about 50 ms at 100 000
// records — and change no record. Readers must not wait for them: a
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
