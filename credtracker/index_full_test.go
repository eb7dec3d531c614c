package credtracker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
)

// TestIndexFullFailsClosed: a record that does not fit the index's 32-bit
// offsets (lowered here to a few records) is not placed, its previous
// version is dropped (it may grant what the new one no longer does), and
// from then on every decision that finds no record requires verification:
// a lost record never makes its image look preloaded.
func TestIndexFullFailsClosed(t *testing.T) {
	trI, err := New(context.Background(), Config{Dir: t.TempDir()}, nil, WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	tr := trI.(*tracker)
	t.Cleanup(func() { tr.Close() })
	saved := maxArena
	t.Cleanup(func() { maxArena = saved })

	credA := benchCred(tr.hasher, 1)
	pull := func(i int) error {
		if err := tr.RecordPullIntent(benchImage(i)); err != nil {
			return err
		}
		return tr.RecordImagePulled(benchImage(i), benchRef(i), credA)
	}
	request := func(i int, creds ...credential.Credential) Request {
		return Request{Image: benchImage(i), ImageRef: benchRef(i), Names: []string{benchImage(i)}, PullPolicy: corev1.PullIfNotPresent,
			Credentials: func() []credential.Credential { return creds }}
	}
	require.NoError(t, pull(0))
	require.NoError(t, pull(1))
	require.Equal(t, Decision{Action: UseImage, Reason: ReasonCredentialMatch}, tr.Decide(request(0, credA)))
	preloaded := 7 // present, never pulled by the node
	require.Equal(t, Decision{Action: UseImage, Reason: ReasonPreloaded}, tr.Decide(request(preloaded)))
	require.False(t, tr.Status().Degraded)

	maxArena = tr.images.s.live + tr.images.s.garbage // full: nothing more fits
	// Tenant A's secret is deleted: the record of image 0 loses its entry,
	// but the new version does not fit.
	require.NoError(t, tr.ForgetSecret(credA.Source.Namespace, credA.Source.Name, credA.Source.UID))

	assert.Equal(t, Decision{Action: Pull, Reason: ReasonRecordsUnreadable}, tr.Decide(request(0, credA)), "the old version must not grant")
	assert.Equal(t, Decision{Action: Pull, Reason: ReasonRecordsUnreadable}, tr.Decide(request(preloaded)), "a missing record may be a lost one")
	assert.True(t, tr.Status().Degraded)
}
