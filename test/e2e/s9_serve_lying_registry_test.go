package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/hostile"
)

// Scenario 9 through `pullguard serve`: a tenant's registry answers a HEAD
// of evil/app:v1 with the digest of tenant A's private manifest and never
// serves those bytes. containerd, behind the proxy, names tenant A's
// content evil/app:v1; the proxy GETs the manifest with the credential
// crictl sent, sees the registry did not serve the bytes containerd
// resolved, and refuses. Nothing gets through the proxy: not to the
// pulling tenant, not to another tenant's pod, not after the daemon
// restarts. The liar's log shows what was asked.
func TestServeLyingRegistry(t *testing.T) {
	need(t)
	alice, mallory := newTenant("s9v-alice"), newTenant("s9v-mallory")
	h.issuer.grant(alice.user, "s9v/team-a/*", "pull")
	image, victim := pushVictim(t, "s9v/team-a/app", 931)
	d := startServe(t, newRoot(t))
	pg := d.endpoint()
	out, ok := crictlPull(t, pg, "team-a", "app-1", image, alice)
	require.True(t, ok, out)

	for _, tt := range liarModes {
		t.Run(tt.name, func(t *testing.T) {
			liar := startLiar(t, victim, tt.mode)
			evil := liar.Host + "/evil/app:v1"
			m := mark(t)

			out, ok := crictlPull(t, pg, "team-b", "evil", evil, mallory)
			t.Logf("crictl: %s", out)
			t.Logf("the liar's log:\n%s", liar.Log())
			assert.False(t, ok, "the pull through the proxy fails")
			assert.Contains(t, out, "PermissionDenied")
			assert.Contains(t, out, "the registry did not serve the manifest")
			assert.NotContains(t, out, mallory.password)
			assert.True(t, inspecti(t, h.containerd.endpoint(), evil), "containerd did name tenant A's content evil/app:v1 (the attack reached the runtime)")
			assert.Equal(t, criImageID(t, image), criImageID(t, evil), "and it is tenant A's image")
			assert.False(t, inspecti(t, pg, evil), "the proxy reports it absent")

			heads, gets := manifestRequests(liar)
			assert.Positive(t, heads, "containerd resolved by HEAD")
			assert.Positive(t, gets, "pullguard asked for the bytes")

			// Another tenant's pod, with nothing to show: refused too.
			// containerd now holds the name, so serve first asks the liar
			// for that image's manifest: a liar that serves no bytes
			// answers 404, which is the pull's answer (the runtime is not
			// asked); one that serves other bytes sends the pull to the
			// runtime, whose check refuses it.
			out, ok = crictlPull(t, pg, "team-c", "victim", evil, nil)
			assert.False(t, ok, out)
			if tt.mode == hostile.NoBytes {
				assert.Contains(t, out, "NotFound")
				assert.Contains(t, out, "404 Not Found")
			} else {
				assert.Contains(t, out, "the registry did not serve the manifest")
			}
			assert.Zero(t, trafficFor(t, m, "s9v/team-a/app").blobs, "tenant A's registry served nothing to the intruders")
			assert.Zero(t, trafficFor(t, m, "s9v/team-a/app").manifestOK)

			// A restart: the name still needs verification.
			d.proc.stop()
			d.start(t)
			assert.False(t, inspecti(t, pg, evil), "after a restart the proxy still reports it absent")
			// Tenant A's image is still tenant A's, from its record.
			m = mark(t)
			out, ok = crictlPull(t, pg, "team-a", "app-2", image, alice)
			require.True(t, ok, out)
			assert.Zero(t, registryRequests(t, m))
		})
	}
}
