package credtracker_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/credtracker"
)

// TestImport checks what a node learns from elsewhere (the kubelet's own
// records, a lost pull outcome): it survives a restart, never downgrades
// an entry, and an unknown origin makes names without an entry verify.
func TestImport(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	const reg = "registry.example"
	alice := e.secretCred(reg, "a", "s", "u1", "alice", "pw")
	e.pull(reg+"/team-a/app:v1", refApp, alice) // pullguard's own record

	imp, ok := e.tr.(credtracker.Importer)
	require.True(t, ok)
	err := imp.Import([]credtracker.ImportedPull{
		{Image: reg + "/team-a/app:v1", ImageRef: refApp},                      // already recorded: kept
		{Image: reg + "/public/tool", ImageRef: refBase, NodeAccessible: true}, // the kubelet found it node-wide
		{Image: reg + "/team-b/secret:1", ImageRef: refOther},                  // pulled with a secret the tracker does not know
		{Image: "Not A Name", ImageRef: refOther},                              // skipped, reported
		{Image: reg + "/x/y", ImageRef: ""},                                    // skipped, reported
	}, []string{refOther}, "switched over")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Not A Name")

	decide := func(image, ref string, creds ...string) credtracker.Decision {
		req := credtracker.Request{Image: image, PullPolicy: corev1.PullIfNotPresent, ImageRef: ref, Names: []string{image}}
		if len(creds) > 0 {
			req.Credentials = credsFunc(alice)
		}
		return e.tr.Decide(req)
	}
	for _, phase := range []string{"imported", "after a restart"} {
		t.Run(phase, func(t *testing.T) {
			assert.Equal(t, credtracker.ReasonCredentialMatch, decide(reg+"/team-a/app:v1", refApp, "alice").Reason, "the existing entry is kept")
			assert.Equal(t, credtracker.ReasonNodeAccessible, decide(reg+"/public/tool:1", refBase).Reason)
			assert.Equal(t, credtracker.Decision{Action: credtracker.Pull, Reason: credtracker.ReasonNoMatch}, decide(reg+"/team-b/secret:1", refOther))
			assert.Equal(t, credtracker.Decision{Action: credtracker.Pull, Reason: credtracker.ReasonUnknownOrigin}, decide(reg+"/other/name:1", refOther),
				"another name of an image of unknown origin verifies")
			assert.Equal(t, 3, e.tr.Status().Records)
		})
		e.restart()
	}
}
