package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/hostile"
	"github.com/pullguard/pullguard/pkg/registry"
)

// verifiedPullManifests is what one verification pull of a present image
// costs in successful manifest requests on containerd: containerd's HEAD,
// then pullguard's GET of the bytes (scenario 10 shows why), through
// `pullguard run` and through `pullguard serve` alike.
const verifiedPullManifests = 2

// Scenario 10: a tenant runs its own registry that answers a HEAD of
// evil/app:v1 with the digest of tenant A's private manifest (digests are
// not secret) and never serves those bytes. containerd names the content
// it already holds; pullguard fetches the manifest itself with the pod's
// credentials, sees the bytes do not hash to the digest containerd
// resolved, and refuses: the pod fails, nothing is recorded for the name,
// and a third tenant's Never pod naming it is refused too, before and
// after a restart. The liar's log shows what was asked.
func TestLyingRegistry(t *testing.T) {
	need(t)
	alice := newTenant("s10-alice")
	h.issuer.grant(alice.user, "s10/team-a/*", "pull")
	const seed = 1001
	image := push(t, "s10/team-a/app", "v1", seed)
	img, err := registry.Image(seed, 2, 16<<10)
	require.NoError(t, err)
	digest, err := img.Digest()
	require.NoError(t, err)
	mt, err := img.MediaType()
	require.NoError(t, err)
	secret := secretYAML("team-a", "regcred", alice)
	root := newRoot(t)
	out := pullguard(t, root, secret+podYAML("team-a", "app", image, "IfNotPresent", "regcred"))
	require.Empty(t, out.Results[0].Error, out.Results[0].Message)
	imageID := out.Results[0].ImageRef

	for _, tt := range []struct {
		name string
		mode hostile.Mode
	}{
		{name: "GET 404", mode: hostile.NoBytes},
		{name: "other bytes", mode: hostile.OtherBytes},
		{name: "other bytes as signed schema 1", mode: hostile.OtherBytesSchema1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			liar, err := hostile.Start(digest.String(), string(mt), tt.mode)
			require.NoError(t, err)
			t.Cleanup(liar.Close)
			evil := liar.Host + "/evil/app:v1"
			m := mark(t)

			out := pullguard(t, root, secret+podYAML("team-b", "evil", evil, "IfNotPresent")+podYAML("team-c", "victim", evil, "Never"))
			t.Logf("the liar's log:\n%s", liar.Log())

			evilRes := out.result(t, "team-b/evil")
			assert.Equal(t, "ErrImagePull", evilRes.Error, evilRes.Message)
			assert.Empty(t, evilRes.ImageRef)
			assert.Contains(t, evilRes.Message, "not verified")
			victim := out.result(t, "team-c/victim")
			assert.Equal(t, "ErrImageNeverPull", victim.Error, "a name the runtime made for unserved bytes is not preloaded: %s", victim.Message)

			var heads, gets int
			for _, r := range liar.Requests() {
				switch {
				case r.Method == http.MethodHead && strings.Contains(r.Path, "/manifests/"):
					heads++
				case r.Method == http.MethodGet && strings.Contains(r.Path, "/manifests/"):
					gets++
				}
			}
			assert.Positive(t, heads, "containerd resolved by HEAD")
			assert.Positive(t, gets, "pullguard asked for the bytes")
			assert.Zero(t, trafficFor(t, m, "s10/team-a/app").blobs, "tenant A's registry served nothing to the intruder")

			// A restart: the name still needs verification.
			out = pullguard(t, root, podYAML("team-c", "victim-2", evil, "Never"))
			assert.Equal(t, "ErrImageNeverPull", out.Results[0].Error, out.Results[0].Message)
			// Tenant A's image is still A's, by its own name.
			out = pullguard(t, root, secret+podYAML("team-a", "app-2", image, "Never", "regcred"))
			assert.Empty(t, out.Results[0].Error, out.Results[0].Message)
			assert.Equal(t, imageID, out.Results[0].ImageRef)
		})
	}
}
