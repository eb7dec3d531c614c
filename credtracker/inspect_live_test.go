package credtracker_test

import (
	"errors"
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
	lister, ok := e.tr.(credtracker.LiveInspector)
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

// TestEachRecordOfARunningTracker: a running tracker gives each record,
// sorted by image ref, as Records does and as ReadRecords reads them
// once it is closed; fn's error stops the walk.
func TestEachRecordOfARunningTracker(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	live, ok := e.tr.(credtracker.LiveInspector)
	require.True(t, ok, "the tracker lists its records one at a time")
	for _, ref := range []string{refOther, refApp, refBase} {
		e.pull("registry.example/team/"+ref[7:12]+":v1", ref, e.secretCred("registry.example", "team", "pull", "uid-1", "alice", "pw"))
		e.clock.Step(time.Minute)
	}
	e.pull("registry.example/team/app:v2", refApp, nodeCred(e.tr.Hasher(), "registry.example"))

	var got []credtracker.ImageRecord
	require.NoError(t, live.EachRecord(func(r credtracker.ImageRecord) error { got = append(got, r); return nil }))
	require.Len(t, got, 3)
	assert.Equal(t, []string{refApp, refBase, refOther}, []string{got[0].ImageRef, got[1].ImageRef, got[2].ImageRef}, "sorted by image ref")
	assert.Equal(t, e.tr.Records(), got, "as Records gives them")

	stop := errors.New("stop")
	n := 0
	assert.ErrorIs(t, live.EachRecord(func(credtracker.ImageRecord) error { n++; return stop }), stop)
	assert.Equal(t, 1, n, "the walk stops at the first error")

	require.NoError(t, e.tr.Close())
	stored, _, err := credtracker.ReadRecords(e.dir)
	require.NoError(t, err)
	assert.Equal(t, len(stored), len(got))
	for i := range stored {
		assert.Equal(t, stored[i].ImageRef, got[i].ImageRef)
		assert.Equal(t, len(stored[i].Repositories), len(got[i].Repositories), "%s", got[i].ImageRef)
	}
}
