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

// TestDecideSeesAPullThatEndsDuringItsLookUp: tenant A's pull of a
// private image is in flight when tenant B's pod asks for the image (the
// runtime already has it); the pull ends, and is recorded, between the
// decision's look-up and its check of the pulls in flight. The decision
// must not take the image for a preloaded one: it must see A's record, or
// the pull in flight.
func TestDecideSeesAPullThatEndsDuringItsLookUp(t *testing.T) {
	const image = "registry.example/tenant-a/private:v1"
	ref := benchRef(7)
	for _, tc := range []struct {
		name  string
		image string // as tenant B's pod names it
		want  Reason
	}{
		{name: "by its name", image: image, want: ReasonNoMatch},
		{name: "by a digest of its repository", image: "registry.example/tenant-a/private@" + ref, want: ReasonNoMatch},
		{name: "by its image ID", image: ref, want: ReasonUnlistedName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trI, err := New(context.Background(), Config{Dir: t.TempDir()}, nil, WithLogger(klog.Background().V(10)))
			require.NoError(t, err)
			tr := trI.(*tracker)
			t.Cleanup(func() { tr.Close() })
			credA, credB := benchCred(tr.hasher, 1), benchCred(tr.hasher, 2)
			require.NotEqual(t, credA.Hash, credB.Hash)

			require.NoError(t, tr.RecordPullIntent(image))
			ended := false
			tr.missHook = func() {
				tr.missHook = nil
				require.NoError(t, tr.RecordImagePulled(image, ref, credA))
				ended = true
			}
			d := tr.Decide(Request{Image: tc.image, ImageRef: ref, Names: []string{image}, PullPolicy: corev1.PullIfNotPresent,
				Credentials: func() []credential.Credential { return []credential.Credential{credB} }})
			require.True(t, ended, "the pull did not end during the decision")
			assert.Equal(t, Decision{Action: Pull, Reason: tc.want}, d)

			// Tenant A, with the credential that pulled it, is admitted.
			d = tr.Decide(Request{Image: image, ImageRef: ref, Names: []string{image}, PullPolicy: corev1.PullIfNotPresent,
				Credentials: func() []credential.Credential { return []credential.Credential{credA} }})
			assert.Equal(t, Decision{Action: UseImage, Reason: ReasonCredentialMatch}, d)
		})
	}
}
