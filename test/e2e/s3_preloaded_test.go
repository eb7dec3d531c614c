package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Scenario 3: preloaded images (pulled into containerd directly through
// CRI, never by pullguard) under each policy, and kubernetes#138175.
func TestPreloadedImages(t *testing.T) {
	need(t)
	alice := newTenant("s3-alice")
	h.issuer.grant(alice.user, "s3/vendor/*", "pull")
	h.issuer.grant(alice.user, "s3/team-a/*", "pull")
	h.issuer.grant("", "s3/public/*", "pull")
	agent := push(t, "s3/vendor/agent", "1", 301)
	criPull(t, agent, alice) // baked into the node
	secret := secretYAML("team-a", "regcred", alice)
	intruder := podYAML("team-b", "agent", agent, "Never")

	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "default policy: preloaded images are free"},
		{name: "AlwaysVerify: verified", args: []string{"--image-pull-credentials-verification-policy", "AlwaysVerify"}, wantErr: "ErrImageNeverPull"},
		{name: "NeverVerifyAllowlistedImages, not allowlisted", args: []string{"--config", writeFile(t, "s3-kc1.yaml", kubeletConfig("NeverVerifyAllowlistedImages", host()+"/s3/other/*"))}, wantErr: "ErrImageNeverPull"},
		{name: "NeverVerifyAllowlistedImages, allowlisted", args: []string{"--config", writeFile(t, "s3-kc2.yaml", kubeletConfig("NeverVerifyAllowlistedImages", host()+"/s3/vendor/*"))}},
		{name: "NeverVerify", args: []string{"--image-pull-credentials-verification-policy", "NeverVerify"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mark(t)
			out := pullguard(t, newRoot(t), secret+intruder, tt.args...)
			assert.Equal(t, tt.wantErr, out.Results[0].Error, out.Results[0].Message)
			assert.Zero(t, registryRequests(t, m), "Never never contacts the registry")
		})
	}

	t.Run("AlwaysVerify: an IfNotPresent pod proves access to a preloaded image", func(t *testing.T) {
		m := mark(t)
		out := pullguard(t, newRoot(t), secret+podYAML("team-b", "agent-2", agent, "IfNotPresent")+podYAML("team-a", "agent", agent, "IfNotPresent", "regcred"),
			"--image-pull-credentials-verification-policy", "AlwaysVerify")
		assert.Equal(t, "ErrImagePull", out.result(t, "team-b/agent-2").Error)
		assert.Empty(t, out.result(t, "team-a/agent").Error)
		tf := trafficFor(t, m, "s3/vendor/agent")
		assert.Equal(t, verifiedPresentManifests, tf.manifestOK)
		assert.Zero(t, tf.blobs)
	})

	t.Run("kubernetes#138175: a digest pulled with a secret under one name does not poison another", func(t *testing.T) {
		private := push(t, "s3/team-a/base", "1", 302)
		public := push(t, "s3/public/base", "1", 302) // the same bytes
		criPull(t, public, nil)                       // preloaded, anonymously
		root := newRoot(t)
		out := pullguard(t, root, secret+podYAML("team-a", "base", private, "IfNotPresent", "regcred"))
		require.Empty(t, out.Results[0].Error, out.Results[0].Message)
		publicRef := out.Results[0].ImageRef
		m := mark(t)
		out = pullguard(t, root, secret+podYAML("team-b", "base", public, "Never")+podYAML("team-b", "private", private, "Never"))
		assert.Empty(t, out.result(t, "team-b/base").Error, "the public name stays free")
		assert.Equal(t, publicRef, out.result(t, "team-b/base").ImageRef, "one image, two names")
		assert.Equal(t, "ErrImageNeverPull", out.result(t, "team-b/private").Error, "the private name stays protected")
		assert.Zero(t, registryRequests(t, m))
	})
}

func kubeletConfig(policy string, allowlist ...string) string {
	s := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: " + policy + "\n"
	if len(allowlist) > 0 {
		s += "preloadedImagesVerificationAllowlist:\n"
		for _, a := range allowlist {
			s += "- " + a + "\n"
		}
	}
	return s
}
