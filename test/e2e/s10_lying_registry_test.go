package e2e

import (
	"net/http"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/hostile"
	"github.com/pullguard/pullguard/pkg/registry"
)

// verifiedPresentManifests is what the verification of a present image
// costs (an IfNotPresent pod hidden from it, or an Always pull of it):
// pullguard's GET of the bytes alone, which stands for the pull (the
// runtime is not asked: guardedpull's check of a present image), through
// `pullguard run` and through `pullguard serve` alike.
const verifiedPresentManifests = 1

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
	image, victim := pushVictim(t, "s10/team-a/app", 1001)
	secret := secretYAML("team-a", "regcred", alice)
	root := newRoot(t)
	out := pullguard(t, root, secret+podYAML("team-a", "app", image, "IfNotPresent", "regcred"))
	require.Empty(t, out.Results[0].Error, out.Results[0].Message)
	imageID := out.Results[0].ImageRef

	for _, tt := range liarModes {
		t.Run(tt.name, func(t *testing.T) {
			liar := startLiar(t, victim, tt.mode)
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

			heads, gets := manifestRequests(liar)
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

// liarModes are the ways a tenant's registry claims another tenant's
// digest without serving its bytes.
var liarModes = []struct {
	name string
	mode hostile.Mode
}{
	{name: "GET 404", mode: hostile.NoBytes},
	{name: "other bytes", mode: hostile.OtherBytes},
	{name: "other bytes as signed schema 1", mode: hostile.OtherBytesSchema1},
}

// pushVictim pushes tenant A's private image (seeded) to repo:v1 and returns
// its name and the image, whose digest a liar then claims.
func pushVictim(t *testing.T, repo string, seed int64) (string, v1.Image) {
	t.Helper()
	image := push(t, repo, "v1", seed)
	img, err := registry.Image(seed, 2, 16<<10)
	require.NoError(t, err)
	return image, img
}

// startLiar starts a registry that claims victim's digest in mode; the test
// stops it.
func startLiar(t *testing.T, victim v1.Image, mode hostile.Mode) *hostile.Registry {
	t.Helper()
	digest, err := victim.Digest()
	require.NoError(t, err)
	mt, err := victim.MediaType()
	require.NoError(t, err)
	liar, err := hostile.Start(digest.String(), string(mt), mode)
	require.NoError(t, err)
	t.Cleanup(liar.Close)
	return liar
}

// manifestRequests counts the manifest HEADs and GETs the liar was sent.
func manifestRequests(liar *hostile.Registry) (heads, gets int) {
	for _, r := range liar.Requests() {
		switch {
		case r.Method == http.MethodHead && strings.Contains(r.Path, "/manifests/"):
			heads++
		case r.Method == http.MethodGet && strings.Contains(r.Path, "/manifests/"):
			gets++
		}
	}
	return heads, gets
}
