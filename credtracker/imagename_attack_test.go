package credtracker_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/credtracker"
)

// TestNameSpellingsNeverBorrowARecord: a tenant without credentials asks
// for an image another tenant pulled, spelling its name in ways the old
// parsers folded or accepted (host case, empty path components, "___").
// With the kubelet's grammar each spelling is either invalid or a name of
// its own with no record: the pod is never admitted on the other tenant's
// pull.
func TestNameSpellingsNeverBorrowARecord(t *testing.T) {
	const pulled = "registry.example/team-a/app:v1"
	spellings := []string{
		"Registry.Example/team-a/app:v1",
		"REGISTRY.EXAMPLE/team-a/app:v1",
		"registry.example//team-a/app:v1",
		"registry.example/team-a//app:v1",
		"registry.example/team___a/app:v1",
		"registry.example/team-a/app/:v1",
		"/registry.example/team-a/app:v1",
	}
	for _, policy := range []credtracker.Policy{credtracker.NeverVerifyPreloadedImages, credtracker.AlwaysVerify} {
		for _, image := range spellings {
			t.Run(string(policy)+" "+image, func(t *testing.T) {
				e := newEnv(t, credtracker.Config{Policy: policy})
				e.pull(pulled, refApp, e.secretCred("registry.example", "team-a", "regcred", "uid-a", "alice", "pw-a"))
				for _, pp := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullNever} {
					d := e.tr.Decide(credtracker.Request{Image: image, PullPolicy: pp, ImageRef: refApp, Names: []string{pulled}, Credentials: credsFunc()})
					assert.NotEqual(t, credtracker.UseImage, d.Action, "%s admitted with %s: %s", image, pp, d.Reason)
				}
			})
		}
	}
}
