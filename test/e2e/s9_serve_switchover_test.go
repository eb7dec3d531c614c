package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1alpha1 "k8s.io/kubelet/config/v1alpha1"

	"github.com/pullguard/pullguard/credtracker"
)

// Scenario 9, switching over: a node where the kubelet's own
// implementation pulled images (its records under
// <kubelet root>/image_manager) starts pullguard serve. What needed a
// credential still does; what the kubelet found node-accessible stays
// free; images with no record at all need one verification (the default
// --unrecorded-images=verify).
func TestServeSwitchOver(t *testing.T) {
	need(t)
	alice, bob := newTenant("s9s-alice"), newTenant("s9s-bob")
	h.issuer.grant(alice.user, "s9s/team-a/*", "pull")
	h.issuer.grant("", "s9s/public/*", "pull")
	private := push(t, "s9s/team-a/app", "v1", 921)
	public := push(t, "s9s/public/tool", "1", 922)
	unrecorded := push(t, "s9s/public/old", "1", 923)
	// What the kubelet pulled, as it pulled it, then its records.
	privateRef := criPull(t, private, alice)
	publicRef := criPull(t, public, nil)
	criPull(t, unrecorded, nil) // pulled by a kubelet without the gate: no record
	kroot := filepath.Join(newRoot(t), "kubelet")
	writeKubeletRecord(t, kroot, "a", kubeletv1alpha1.ImagePulledRecord{ImageRef: privateRef, CredentialMapping: map[string]kubeletv1alpha1.ImagePullCredentials{
		repoOf(t, private): {KubernetesSecrets: []kubeletv1alpha1.ImagePullSecret{{UID: "uid-1", Namespace: "team-a", Name: "regcred", CredentialHash: "0123"}}},
	}})
	writeKubeletRecord(t, kroot, "b", kubeletv1alpha1.ImagePulledRecord{ImageRef: publicRef, CredentialMapping: map[string]kubeletv1alpha1.ImagePullCredentials{
		repoOf(t, public): {NodePodsAccessible: true},
	}})

	d := startServe(t, newRoot(t), "--kubelet-root-dir", kroot)
	pg := d.endpoint()
	m := mark(t)
	assert.False(t, inspecti(t, pg, private), "the kubelet pulled it with a secret: it needs a credential")
	assert.True(t, inspecti(t, pg, public), "the kubelet found it node-accessible")
	assert.False(t, inspecti(t, pg, unrecorded), "present with no record: verified once")
	assert.Zero(t, registryRequests(t, m))

	out, ok := crictlPull(t, pg, "team-b", "intruder", private, bob)
	assert.False(t, ok, out)
	m = mark(t)
	out, ok = crictlPull(t, pg, "team-a", "app", private, alice)
	require.True(t, ok, out)
	tf := trafficFor(t, m, "s9s/team-a/app")
	assert.Equal(t, verifiedPresentManifests, tf.manifestOK, "tenant A verifies once (its hash is pullguard's, not the kubelet's)")
	assert.Zero(t, tf.blobs)
	out, ok = crictlPull(t, pg, "team-b", "old", unrecorded, nil)
	require.True(t, ok, out)
	assert.True(t, inspecti(t, pg, unrecorded), "verified anonymously: node-accessible from now on")
}

func repoOf(t *testing.T, image string) string {
	t.Helper()
	repo, err := credtracker.RepositoryName(image)
	require.NoError(t, err)
	return repo
}

func writeKubeletRecord(t *testing.T, kroot, file string, r kubeletv1alpha1.ImagePulledRecord) {
	t.Helper()
	r.TypeMeta = metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1alpha1", Kind: "ImagePulledRecord"}
	data, err := json.Marshal(r)
	require.NoError(t, err)
	dir := filepath.Join(kroot, "image_manager", "pulled")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, file), data, 0o600))
}
