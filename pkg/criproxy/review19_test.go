package criproxy_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/criproxy"
)

// TestSizeLookupOpensNoWindow: the kubelet (v1.30+) asks the image's size
// right after a successful pull, with the pod's annotations; on v1.32+ it
// is the only ImageStatus an Always container's pod makes. When that
// look-up finds the pod's proof stale (here: another pod of the tenant
// moved the tag in between), the "absent" answer must not open an answer
// window, or the container's next Always pull is answered from the record
// and a credential revoked at the registry keeps working.
func TestSizeLookupOpensNoWindow(t *testing.T) {
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(1), "alice:pw")
	_, err := h.newPod("a", nil).ensure(t, image, "alice", "pw")
	require.NoError(t, err)

	p := h.newPod("a", nil) // an Always container
	ref, err := p.pullOnly(t, image, "alice", "pw")
	require.NoError(t, err)
	require.Equal(t, id(1), ref)
	// Before p's size look-up, another Always pod of the tenant moves the tag.
	h.fake.publish(t, image, id(2), "alice:pw")
	_, err = h.newPod("a", nil).ensureAlways(t, image, "alice", "pw")
	require.NoError(t, err)
	assert.Zero(t, p.size(t, image), "p proved id(1), the tag is on id(2)")

	h.fake.publish(t, image, id(2), "alice:new") // rotated at the registry
	h.clock.Step(time.Minute)                    // the container crashes, back-off
	m0, _, _ := h.fake.counts()
	_, err = p.pullOnly(t, image, "alice", "pw") // the restart's Always pull
	m1, _, _ := h.fake.counts()
	assert.Equal(t, 1, m1-m0, "the Always pull asks the registry")
	assert.Error(t, err, "the registry no longer takes the old password")
}

// TestNeverAndAlwaysContainersOfOneImage: a pod with a Never container
// (or image volume) and an Always container of one image. On v1.32+ the
// Never container's presence check (reported absent: the pod shows
// nothing) opens the pod's window, and the Always container's pull that
// follows cannot be told from an IfNotPresent pull after its check: it is
// answered from the record, without the registry (the kubelet's own gate
// asks the registry for it). A listed difference (docs/serve.md): it is
// about freshness, never about another tenant. Only a credential the
// record holds is answered so; another tenant's pod of the same shape goes
// to the registry and is refused.
func TestNeverAndAlwaysContainersOfOneImage(t *testing.T) {
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(1), "alice:pw")
	_, err := h.newPod("a", nil).ensure(t, image, "alice", "pw")
	require.NoError(t, err)
	h.fake.publish(t, image, id(1), "alice:new") // rotated at the registry

	for _, tc := range []struct {
		ns, user, password string
		wantErr            bool
		wantManifest       int
	}{
		{"a", "alice", "pw", false, 0}, // the difference: the old password is not asked again
		{"b", "bob", "nope", true, 1},  // another tenant: the registry decides
	} {
		t.Run(tc.ns, func(t *testing.T) {
			p := h.newPod(tc.ns, nil)
			require.Empty(t, p.presence(t, image), "the Never container: ErrImageNeverPull")
			m0, _, _ := h.fake.counts()
			_, err := p.pullOnly(t, image, tc.user, tc.password) // the Always container
			m1, _, _ := h.fake.counts()
			assert.Equal(t, tc.wantErr, err != nil, "%v", err)
			assert.Equal(t, tc.wantManifest, m1-m0, "registry requests")
		})
	}
}

// TestPodsSeenInOneClockTick: the pod key is the kubelet's config.seen
// (time.Now() to the nanosecond) with the config source and the runtime
// handler; the kubelet stamps the pods of one update one after another (at
// a kubelet restart, every pod of the node). On a clock coarser than that
// loop (a jiffies clocksource) pods of different tenants would share a
// key, and a proof would answer another tenant's pod. So serve measures
// the clock at its start and, if it is too coarse, answers no presence
// check from a proof; and a key that pulls of two pods (two sandbox UIDs)
// carry is never answered from a proof again.
func TestPodsSeenInOneClockTick(t *testing.T) {
	image := reg + "/team-a/app:v1"
	other := reg + "/team-a/other:v1"
	for _, tc := range []struct {
		name string
		opts []criproxy.Option
		// collide has tenant B's pod, sharing A's key, pull another image
		// before it asks for A's.
		collide bool
	}{
		{name: "clock too coarse: no proofs", opts: []criproxy.Option{criproxy.WithClockStep(4 * time.Millisecond)}},
		{name: "a key two sandboxes pulled with", collide: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{serverOpts: tc.opts})
			h.fake.publish(t, image, id(1), "alice:pw")
			h.fake.publish(t, other, id(2), "")
			a := h.newPod("a", nil)
			_, err := a.ensure(t, image, "alice", "pw")
			require.NoError(t, err)
			assert.NotNil(t, h.userLookup(t, image), "the user look-up still reads the image")

			b := h.newPod("b", nil)
			b.ann, b.name = a.ann, "b-pod" // stamped in the same tick, from the same source
			if tc.collide {
				_, err := b.ensure(t, other, "", "")
				require.NoError(t, err)
			}
			assert.Empty(t, b.presence(t, image), "tenant B's pod (a Never container) must not get A's image")
			assert.Empty(t, a.presence(t, image), "nor A's, on the same key: it pulls again, answered from its record")
			_, err = b.pullOnly(t, image, "bob", "nope")
			assert.Error(t, err)
		})
	}
	t.Run("fine clock, one pod", func(t *testing.T) {
		h := newHarness(t, harnessConfig{serverOpts: []criproxy.Option{criproxy.WithClockStep(30 * time.Nanosecond)}})
		h.fake.publish(t, image, id(1), "alice:pw")
		a := h.newPod("a", nil)
		_, err := a.ensure(t, image, "alice", "pw")
		require.NoError(t, err)
		assert.Equal(t, id(1), a.presence(t, image), "its own proof")
	})
}
