package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Scenario 8: with the gate off, the stock kubelet hands tenant B the image
// tenant A pulled. The feature is what makes the difference.
func TestGateOff(t *testing.T) {
	need(t)
	alice := newTenant("s8-alice")
	h.issuer.grant(alice.user, "s8/team-a/*", "pull")
	image := push(t, "s8/team-a/app", "v1", 801)
	pods := secretYAML("team-a", "regcred", alice) + podYAML("team-a", "app", image, "IfNotPresent", "regcred")
	intruder := podYAML("team-b", "intruder", image, "Never")

	off := newRoot(t)
	out := pullguard(t, off, pods, "--feature-gates", "KubeletEnsureSecretPulledImages=false")
	require.Empty(t, out.Results[0].Error, out.Results[0].Message)
	m := mark(t)
	out = pullguard(t, off, intruder, "--feature-gates", "KubeletEnsureSecretPulledImages=false")
	assert.Empty(t, out.Results[0].Error, "gate off: tenant B gets tenant A's private image")
	assert.Equal(t, `Container image "`+image+`" already present on machine`, out.Results[0].Message)
	assert.Zero(t, registryRequests(t, m))
	_, err := os.Stat(filepath.Join(off, "credtracker"))
	assert.True(t, os.IsNotExist(err), "no records with the gate off")

	// The same story with the gate on, on an image of its own: the image
	// above is on the node already, and a node state that did not pull it
	// counts it as preloaded (see docs/operations.md, "Turning it on").
	image2 := push(t, "s8/team-a/app2", "v1", 802)
	on := newRoot(t)
	out = pullguard(t, on, secretYAML("team-a", "regcred", alice)+podYAML("team-a", "app", image2, "IfNotPresent", "regcred")+podYAML("team-b", "intruder", image2, "Never"))
	require.Empty(t, out.result(t, "team-a/app").Error)
	assert.Equal(t, "ErrImageNeverPull", out.result(t, "team-b/intruder").Error, "gate on: refused")
}
