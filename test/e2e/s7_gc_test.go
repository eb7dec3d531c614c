package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/podworkers"
)

// Scenario 7: image garbage collection removes an image from containerd
// and its records from the tracker.
func TestImageGarbageCollection(t *testing.T) {
	need(t)
	alice := newTenant("s7-alice")
	h.issuer.grant(alice.user, "s7/team-a/*", "pull")
	image := push(t, "s7/team-a/app", "v1", 701)
	keep := push(t, "s7/team-a/keep", "v1", 702)
	ctx := context.Background()
	n := startNode(t, newRoot(t))
	m, err := podworkers.Load("s7", []byte(secretYAML("team-a", "regcred", alice)+podYAML("team-a", "app", image, "IfNotPresent", "regcred")+podYAML("team-a", "keep", keep, "IfNotPresent", "regcred")))
	require.NoError(t, err)
	results := n.Run(ctx, m)
	require.Empty(t, results[0].Error, results[0].Message)
	require.Len(t, n.Tracker.Records(), 2)

	require.NoError(t, n.Images.RemoveImage(ctx, results[0].ImageRef))
	st, err := n.Runtime.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
	require.NoError(t, err)
	assert.Nil(t, st.GetImage(), "containerd removed the image")
	recs := n.Tracker.Records()
	require.Len(t, recs, 1, "the removed image's record is gone")
	assert.Equal(t, results[1].ImageRef, recs[0].ImageRef)
}
