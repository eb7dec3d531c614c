package e2e

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refused is containerd's wording for the registry's 401: with basic auth
// "401 Unauthorized", with token auth (as here) "pull access denied ...
// authorization failed".
var refused = regexp.MustCompile(`401 Unauthorized|pull access denied.*authorization failed`)

// Scenario 1: tenant A pulls its private image; B is refused by the
// registry (or told the image is absent, with Never); A's second pod makes
// no registry request; C, with its own credentials, is verified by one
// manifest request and downloads no layer.
func TestTenants(t *testing.T) {
	need(t)
	alice, bob, carol := newTenant("s1-alice"), newTenant("s1-bob"), newTenant("s1-carol")
	h.issuer.grant(alice.user, "s1/team-a/*", "pull")
	h.issuer.grant(carol.user, "s1/team-a/*", "pull")
	h.issuer.grant(bob.user, "s1/team-b/*", "pull")
	image := push(t, "s1/team-a/app", "v1", 101)
	repo := "s1/team-a/app"
	root := newRoot(t)
	secrets := secretYAML("team-a", "regcred", alice) + secretYAML("team-b", "regcred", bob) + secretYAML("team-c", "regcred", carol)

	// Tenant A pulls with its secret: the layers come down.
	m := mark(t)
	out := pullguard(t, root, secrets+podYAML("team-a", "app-1", image, "IfNotPresent", "regcred"))
	r := out.result(t, "team-a/app-1")
	require.Empty(t, r.Error, r.Message)
	assert.True(t, r.Pulled)
	tr := trafficFor(t, m, repo)
	assert.Positive(t, tr.manifestOK)
	assert.Positive(t, tr.blobs)

	// Tenant B, no credentials and then its own credentials for other
	// repositories: refused by the registry itself, no layer downloaded.
	for _, pod := range []string{podYAML("team-b", "intruder", image, "IfNotPresent"), podYAML("team-b", "intruder-2", image, "IfNotPresent", "regcred")} {
		m = mark(t)
		out = pullguard(t, root, secrets+pod)
		r = out.Results[0]
		assert.Equal(t, "ErrImagePull", r.Error, r.Pod)
		assert.True(t, r.Pulled)
		assert.Regexp(t, refused, r.Message, r.Pod)
		evs := out.events(r.Pod)
		require.NotEmpty(t, evs)
		last := evs[len(evs)-1]
		assert.Equal(t, event{Object: r.Pod, Type: "Warning", Reason: "Failed", Message: last.Message}, last)
		assert.Regexp(t, refused, last.Message)
		tr = trafficFor(t, m, repo)
		assert.Zero(t, tr.manifestOK, "%s: the registry granted nothing", r.Pod)
		assert.Zero(t, tr.blobs, "%s: no layer downloaded", r.Pod)
		assert.Equal(t, 401, tr.last.Status, "%s: the re-pull ends at the 401", r.Pod)
	}

	// Tenant B with Never: the absent image's message, no registry contact.
	m = mark(t)
	out = pullguard(t, root, secrets+podYAML("team-b", "intruder-never", image, "Never"))
	r = out.Results[0]
	assert.Equal(t, "ErrImageNeverPull", r.Error)
	assert.Equal(t, `Container image "`+image+`" is not present with pull policy of Never`, r.Message)
	assert.Equal(t, []event{{Object: r.Pod, Type: "Warning", Reason: "ErrImageNeverPull", Message: r.Message}}, out.events(r.Pod))
	assert.Zero(t, registryRequests(t, m))

	// Tenant A's second pod: zero registry requests.
	m = mark(t)
	out = pullguard(t, root, secrets+podYAML("team-a", "app-2", image, "IfNotPresent", "regcred"))
	r = out.Results[0]
	require.Empty(t, r.Error, r.Message)
	assert.False(t, r.Pulled)
	assert.Contains(t, r.Message, "already present on machine and can be accessed by the pod")
	assert.Zero(t, registryRequests(t, m))

	// Tenant C with its own valid credentials: one manifest request, no blob.
	m = mark(t)
	out = pullguard(t, root, secrets+podYAML("team-c", "app", image, "IfNotPresent", "regcred"))
	r = out.Results[0]
	require.Empty(t, r.Error, r.Message)
	assert.True(t, r.Pulled)
	tr = trafficFor(t, m, repo)
	assert.Equal(t, verifiedPresentManifests, tr.manifestOK, "pullguard's GET of the manifest, no runtime pull")
	assert.Zero(t, tr.blobs, "a verification downloads no layer")
	t.Logf("tenant C's verification in the registry's log: %d manifest 200, %d manifest challenged, %d blobs", tr.manifestOK, tr.manifestDenied, tr.blobs)
}
