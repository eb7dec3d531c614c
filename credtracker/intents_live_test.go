package credtracker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/credtracker"
)

// TestPendingIntentsOfARunningTracker: a running tracker lists the
// intents its store holds, as ReadIntents reads them once it is closed.
func TestPendingIntentsOfARunningTracker(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	lister, ok := e.tr.(credtracker.IntentLister)
	require.True(t, ok, "the tracker lists its intents")

	got, err := lister.PendingIntents()
	require.NoError(t, err)
	assert.Empty(t, got, "no pull started")

	require.NoError(t, e.tr.RecordPullIntent("registry.example/team/b:v1"))
	e.clock.Step(time.Minute)
	require.NoError(t, e.tr.RecordPullIntent("registry.example/team/a:v1"))
	require.NoError(t, e.tr.RecordPullIntent("registry.example/team/a:v1")) // a second pull of it: one intent
	require.NoError(t, e.tr.RecordPullIntent("registry.example/team/c:v1"))
	require.NoError(t, e.tr.RecordImagePulled("registry.example/team/c:v1", refApp, nodeCred(e.tr.Hasher(), "registry.example")))

	got, err = lister.PendingIntents()
	require.NoError(t, err)
	assert.Equal(t, []credtracker.PendingIntent{
		{Image: "registry.example/team/a:v1", Since: epoch.Add(time.Minute)},
		{Image: "registry.example/team/b:v1", Since: epoch},
	}, got)

	require.NoError(t, e.tr.Close())
	stored, err := credtracker.ReadIntents(e.dir)
	require.NoError(t, err)
	assert.Equal(t, stored, got, "what ReadIntents reads from the closed store")
}
