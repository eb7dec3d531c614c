package criproxy_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
