package criproxy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

var kubeletTypeMeta = func(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1alpha1", Kind: kind}
}

func writeJSON(t *testing.T, path string, v any) {
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	data, err := json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

// kubeletRoot writes the kubelet's own records, as its implementation
// leaves them: a secret-pulled image, an anonymously pulled one, and a
// pull intent of an image that was then stored.
func kubeletRoot(t *testing.T) string {
	root := t.TempDir()
	dir := filepath.Join(root, "image_manager")
	writeJSON(t, filepath.Join(dir, "pulled", "sha256-a"), kubeletv1alpha1.ImagePulledRecord{
		TypeMeta: kubeletTypeMeta("ImagePulledRecord"), ImageRef: id(1), LastUpdatedTime: metav1.NewTime(time.Unix(1, 0)),
		CredentialMapping: map[string]kubeletv1alpha1.ImagePullCredentials{
			reg + "/team-a/app": {KubernetesSecrets: []kubeletv1alpha1.ImagePullSecret{{UID: "u", Namespace: "a", Name: "s", CredentialHash: "abc"}}},
		},
	})
	writeJSON(t, filepath.Join(dir, "pulled", "sha256-b"), kubeletv1alpha1.ImagePulledRecord{
		TypeMeta: kubeletTypeMeta("ImagePulledRecord"), ImageRef: id(2),
		CredentialMapping: map[string]kubeletv1alpha1.ImagePullCredentials{reg + "/public/app": {NodePodsAccessible: true}},
	})
	writeJSON(t, filepath.Join(dir, "pulling", "sha256-c"), kubeletv1alpha1.ImagePullIntent{TypeMeta: kubeletTypeMeta("ImagePullIntent"), Image: reg + "/team-b/app:v1"})
	return root
}

func TestSwitchOver(t *testing.T) {
	tests := []struct {
		name       string
		mode       criproxy.UnrecordedImages
		unreadable bool
		want       map[string]bool // image -> reported present
	}{{
		name: "verify",
		mode: criproxy.UnrecordedVerify,
		want: map[string]bool{
			reg + "/team-a/app:v1": false, reg + "/public/app:v1": true, reg + "/team-b/app:v1": false, reg + "/side/loaded:v1": false,
		},
	}, {
		name: "preloaded",
		mode: criproxy.UnrecordedPreloaded,
		want: map[string]bool{
			reg + "/team-a/app:v1": false, reg + "/public/app:v1": true, reg + "/team-b/app:v1": false, reg + "/side/loaded:v1": true,
		},
	}, {
		name:       "preloaded, but a kubelet record is unreadable",
		mode:       criproxy.UnrecordedPreloaded,
		unreadable: true,
		want: map[string]bool{
			reg + "/team-a/app:v1": false, reg + "/public/app:v1": true, reg + "/team-b/app:v1": false, reg + "/side/loaded:v1": false,
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kroot := kubeletRoot(t)
			if tc.unreadable {
				require.NoError(t, os.WriteFile(filepath.Join(kroot, "image_manager", "pulled", "torn"), []byte(`{"kind":"ImagePulledRec`), 0o600))
			}
			h := newHarness(t, harnessConfig{setup: func(f *fakeBackend) {
				f.preload(t, id(1), reg+"/team-a/app:v1")
				f.preload(t, id(2), reg+"/public/app:v1")
				f.preload(t, id(3), reg+"/team-b/app:v1")
				f.preload(t, id(4), reg+"/side/loaded:v1")
			}})
			imp := h.tracker.(credtracker.Importer)
			serveRoot := t.TempDir()
			rec := durabletest.Record(t, serveRoot)
			res, err := criproxy.SwitchOver(context.Background(), imp, guardedpull.Inventory(h.fake), serveRoot, kroot, tc.mode, time.Unix(100, 0), testLogger())
			require.NoError(t, err)
			require.NotNil(t, res)
			marker := filepath.Join(serveRoot, criproxy.SwitchOverFile)
			assert.Equal(t, [][]string{durabletest.Durable}, rec.Writes(marker), "the marker is written durably: %v", rec.Ops())
			var written criproxy.SwitchOverResult
			data, err := os.ReadFile(marker)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(data, &written))
			assert.Equal(t, *res, written, "the marker says what was imported")
			assert.Equal(t, 2, res.Pulled)
			assert.Equal(t, 1, res.Intents)
			for image, want := range tc.want {
				assert.Equal(t, want, h.present(t, image), image)
			}
			// Only once per root directory.
			again, err := criproxy.SwitchOver(context.Background(), imp, guardedpull.Inventory(h.fake), serveRoot, kroot, tc.mode, time.Unix(200, 0), testLogger())
			require.NoError(t, err)
			assert.Nil(t, again)
		})
	}
}

func TestReadKubeletRecordsRefusesOtherKinds(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "image_manager", "pulled")
	writeJSON(t, filepath.Join(dir, "wrong-kind"), kubeletv1alpha1.ImagePullIntent{TypeMeta: kubeletTypeMeta("ImagePullIntent"), Image: "x"})
	writeJSON(t, filepath.Join(dir, "wrong-version"), kubeletv1alpha1.ImagePulledRecord{TypeMeta: metav1.TypeMeta{APIVersion: "v9", Kind: "ImagePulledRecord"}, ImageRef: id(1)})
	writeJSON(t, filepath.Join(dir, "no-ref"), kubeletv1alpha1.ImagePulledRecord{TypeMeta: kubeletTypeMeta("ImagePulledRecord")})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "huge"), make([]byte, 2<<20), 0o600))
	recs, err := criproxy.ReadKubeletRecords(root)
	require.NoError(t, err)
	assert.Empty(t, recs.Pulled)
	assert.Len(t, recs.Unreadable, 4)

	missing, err := criproxy.ReadKubeletRecords(filepath.Join(root, "nothing-here"))
	require.NoError(t, err)
	assert.Empty(t, missing.Pulled)
	assert.Empty(t, missing.Unreadable)
}

// TestKubeletRecordsOfBothVersions reads records as the kubelet writes
// them since v1.35 (kubelet.config.k8s.io/v1beta1) beside v1alpha1 ones:
// both are read with every field, so a switch-over from a beta kubelet
// keeps its node-accessible images free and its secret-pulled ones guarded.
func TestKubeletRecordsOfBothVersions(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "image_manager")
	updated := metav1.NewTime(time.Unix(7, 0).UTC())
	writeJSON(t, filepath.Join(dir, "pulled", "beta-secret"), kubeletv1beta1.ImagePulledRecord{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "ImagePulledRecord"}, ImageRef: id(1), LastUpdatedTime: updated,
		CredentialMapping: map[string]kubeletv1beta1.ImagePullCredentials{
			reg + "/team-a/app": {
				KubernetesSecrets:         []kubeletv1beta1.ImagePullSecret{{UID: "u", Namespace: "a", Name: "s", CredentialHash: "abc"}},
				KubernetesServiceAccounts: []kubeletv1beta1.ImagePullServiceAccount{{UID: "sa-u", Namespace: "a", Name: "builder"}},
			},
		},
	})
	writeJSON(t, filepath.Join(dir, "pulled", "beta-open"), kubeletv1beta1.ImagePulledRecord{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "ImagePulledRecord"}, ImageRef: id(2),
		CredentialMapping: map[string]kubeletv1beta1.ImagePullCredentials{reg + "/public/app": {NodePodsAccessible: true}},
	})
	writeJSON(t, filepath.Join(dir, "pulling", "beta-intent"), kubeletv1beta1.ImagePullIntent{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "ImagePullIntent"}, Image: reg + "/team-b/app:v1",
	})
	writeJSON(t, filepath.Join(dir, "pulling", "alpha-intent"), kubeletv1alpha1.ImagePullIntent{TypeMeta: kubeletTypeMeta("ImagePullIntent"), Image: reg + "/team-c/app:v1"})

	recs, err := criproxy.ReadKubeletRecords(root)
	require.NoError(t, err)
	assert.Empty(t, recs.Unreadable)
	require.Len(t, recs.Pulled, 2)
	byRef := map[string]kubeletv1alpha1.ImagePulledRecord{}
	for _, r := range recs.Pulled {
		byRef[r.ImageRef] = r
	}
	secret := byRef[id(1)]
	assert.True(t, secret.LastUpdatedTime.Equal(&updated))
	got := secret.CredentialMapping[reg+"/team-a/app"]
	assert.Equal(t, []kubeletv1alpha1.ImagePullSecret{{UID: "u", Namespace: "a", Name: "s", CredentialHash: "abc"}}, got.KubernetesSecrets)
	assert.Equal(t, []kubeletv1alpha1.ImagePullServiceAccount{{UID: "sa-u", Namespace: "a", Name: "builder"}}, got.KubernetesServiceAccounts)
	assert.False(t, got.NodePodsAccessible)
	assert.True(t, byRef[id(2)].CredentialMapping[reg+"/public/app"].NodePodsAccessible)
	var intents []string
	for _, in := range recs.Intents {
		intents = append(intents, in.Image)
	}
	assert.ElementsMatch(t, []string{reg + "/team-b/app:v1", reg + "/team-c/app:v1"}, intents)
}
