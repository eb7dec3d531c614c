package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// criPull pulls through containerd's CRI directly, as something other than
// pullguard would (a preload, or the part of a pull that landed before a
// crash).
func criPull(t *testing.T, image string, who *tenant) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := criruntime.NewRemote(ctx, h.containerd.endpoint(), time.Minute)
	require.NoError(t, err)
	defer rt.Close(ctx)
	var auth *runtimeapi.AuthConfig
	if who != nil {
		auth = &runtimeapi.AuthConfig{Username: who.user, Password: who.password}
	}
	ref, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: image}, auth, nil)
	require.NoError(t, err)
	return ref
}

// Scenario 2: a restart keeps the protection, and a pull interrupted after
// the image landed forces verification.
func TestRestartAndInterruptedPull(t *testing.T) {
	need(t)
	alice := newTenant("s2-alice")
	h.issuer.grant(alice.user, "s2/team-a/*", "pull")
	image := push(t, "s2/team-a/app", "v1", 201)
	root := newRoot(t)
	secret := secretYAML("team-a", "regcred", alice)

	out := pullguard(t, root, secret+podYAML("team-a", "app-1", image, "IfNotPresent", "regcred"))
	require.Empty(t, out.Results[0].Error, out.Results[0].Message)

	// Each pullguard run is a new process over the same root: a restart.
	m := mark(t)
	out = pullguard(t, root, secret+podYAML("team-b", "intruder", image, "Never")+podYAML("team-a", "app-2", image, "IfNotPresent", "regcred"))
	assert.Equal(t, "ErrImageNeverPull", out.result(t, "team-b/intruder").Error)
	assert.Empty(t, out.result(t, "team-a/app-2").Error)
	assert.False(t, out.result(t, "team-a/app-2").Pulled)
	assert.Zero(t, registryRequests(t, m), "after the restart no pod contacted the registry")

	// A pull killed mid-way: the intent is durable, the image landed in
	// containerd, the record was never written.
	image2 := push(t, "s2/team-a/tool", "v1", 202)
	tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: filepath.Join(root, podworkers.TrackerDir)}, nil)
	require.NoError(t, err)
	require.NoError(t, tr.RecordPullIntent(image2))
	require.NoError(t, tr.Close()) // the crash
	criPull(t, image2, alice)

	// The next start turns the intent into a record with no known
	// credential: even the tenant whose pull it was verifies, once.
	m = mark(t)
	out = pullguard(t, root, secret+podYAML("team-b", "intruder-2", image2, "Never")+podYAML("team-a", "tool-1", image2, "IfNotPresent", "regcred")+podYAML("team-a", "tool-2", image2, "IfNotPresent", "regcred"))
	assert.Equal(t, "ErrImageNeverPull", out.result(t, "team-b/intruder-2").Error)
	r := out.result(t, "team-a/tool-1")
	require.Empty(t, r.Error, r.Message)
	assert.True(t, r.Pulled, "verified with the registry")
	assert.False(t, out.result(t, "team-a/tool-2").Pulled, "and remembered")
	tf := trafficFor(t, m, "s2/team-a/tool")
	assert.Equal(t, verifiedPresentManifests, tf.manifestOK)
	assert.Zero(t, tf.blobs)
}
