package e2e

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Scenario 5: exec credential provider plugins (built by the suite): one
// supplies node credentials, one per-service-account credentials from the
// pod's service account token.
func TestCredentialProviderPlugins(t *testing.T) {
	need(t)
	nodeUser, saUser := newTenant("s5-node"), newTenant("s5-sa")
	h.issuer.grant(nodeUser.user, "s5/node/*", "pull")
	h.issuer.grant(saUser.user, "s5/sa/*", "pull")
	nodeImage := push(t, "s5/node/app", "v1", 501)
	saImage := push(t, "s5/sa/app", "v1", 502)
	config := writeFile(t, "s5-providers.yaml", fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: e2e-node-provider
  matchImages: ["%[1]s/s5/node"]
  defaultCacheDuration: 0s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: ["node"]
  env:
  - {name: NODE_USER, value: %[2]s}
  - {name: NODE_PASSWORD, value: %[3]s}
- name: e2e-sa-provider
  matchImages: ["%[1]s/s5/sa"]
  defaultCacheDuration: 0s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: ["sa"]
  env:
  - {name: SA_CREDENTIALS, value: "team-s/puller=%[4]s:%[5]s"}
  tokenAttributes:
    serviceAccountTokenAudience: e2e-registry
    requireServiceAccount: true
    cacheType: ServiceAccount
`, host(), nodeUser.user, nodeUser.password, saUser.user, saUser.password))
	args := []string{"--image-credential-provider-config", config, "--image-credential-provider-bin-dir", h.plugin}
	root := newRoot(t)

	// Node credentials: the image becomes node-accessible.
	out := pullguard(t, root, podYAML("team-x", "app", nodeImage, "IfNotPresent"), args...)
	require.Empty(t, out.Results[0].Error, out.Results[0].Message)
	assert.True(t, out.Results[0].Pulled)
	_, _, nodeAccessible := records(t, root, "s5/node/app")
	assert.True(t, nodeAccessible)
	m := mark(t)
	out = pullguard(t, root, podYAML("team-y", "other", nodeImage, "Never"), args...)
	assert.Empty(t, out.Results[0].Error, "node credentials are every pod's")
	assert.Zero(t, registryRequests(t, m))

	// Service-account credentials: recorded under the service account.
	out = pullguard(t, root, saPodYAML("team-s", "p1", "puller", saImage, "IfNotPresent"), args...)
	require.Empty(t, out.Results[0].Error, out.Results[0].Message)
	assert.True(t, out.Results[0].Pulled)
	_, sas, _ := records(t, root, "s5/sa/app")
	assert.Equal(t, []string{"team-s/puller"}, sas)

	m = mark(t)
	out = pullguard(t, root, saPodYAML("team-s", "p2", "puller", saImage, "IfNotPresent")+saPodYAML("team-s", "p3", "other", saImage, "Never"), args...)
	r := out.result(t, "team-s/p2")
	require.Empty(t, r.Error, r.Message)
	assert.False(t, r.Pulled, "the same service account needs no registry request")
	assert.Equal(t, "ErrImageNeverPull", out.result(t, "team-s/p3").Error, "another service account must prove access")
	assert.Zero(t, trafficFor(t, m, "s5/sa/app").manifestOK)
}
