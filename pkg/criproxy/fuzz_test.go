package criproxy

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1alpha1 "k8s.io/kubelet/config/v1alpha1"

	"github.com/pullguard/pullguard/credtracker"
)

// FuzzKubeletRecord decodes arbitrary bytes as the kubelet's record files
// (read from disk at the first start): never a panic, and an import never
// makes a name node-accessible unless the record said so and listed no
// secret or service account.
func FuzzKubeletRecord(f *testing.F) {
	seed, _ := json.Marshal(kubeletv1alpha1.ImagePulledRecord{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletAPIVersion, Kind: kindImagePulled}, ImageRef: "sha256:1",
		CredentialMapping: map[string]kubeletv1alpha1.ImagePullCredentials{"a/b": {NodePodsAccessible: true}},
	})
	f.Add(seed)
	f.Add([]byte(`{"apiVersion":"kubelet.config.k8s.io/v1alpha1","kind":"ImagePulledRecord","imageRef":"x","credentialMapping":{"a":{"nodePodsAccessible":true,"kubernetesSecrets":[{"name":"s"}]}}}`))
	f.Add([]byte(`{"apiVersion":"kubelet.config.k8s.io/v1alpha1","kind":"ImagePullIntent","image":"a:b"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var recs KubeletRecords
		var r kubeletv1alpha1.ImagePulledRecord
		if decodeKubeletRecord(data, kindImagePulled, &r, &r.TypeMeta) == nil && r.ImageRef != "" {
			recs.Pulled = append(recs.Pulled, r)
		}
		var in kubeletv1alpha1.ImagePullIntent
		if decodeKubeletRecord(data, kindImagePullIntent, &in, &in.TypeMeta) == nil && in.Image != "" {
			recs.Intents = append(recs.Intents, in)
		}
		var present []credtracker.Image
		for _, p := range recs.Pulled {
			present = append(present, credtracker.Image{Ref: p.ImageRef, Names: []string{"x/y:1"}})
		}
		for _, p := range recs.Imports(present) {
			if !p.NodeAccessible {
				continue
			}
			c, ok := r.CredentialMapping[p.Image]
			require.True(t, ok, "import of a name the record does not have")
			assert.True(t, c.NodePodsAccessible && len(c.KubernetesSecrets) == 0 && len(c.KubernetesServiceAccounts) == 0,
				"node-accessible import of %q without a record saying so", p.Image)
		}
	})
}
