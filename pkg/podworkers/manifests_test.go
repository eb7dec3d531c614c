package podworkers_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pullguard/pullguard/pkg/podworkers"
)

func TestLoadFiles(t *testing.T) {
	m, err := podworkers.LoadFiles("testdata/tenants.yaml", "testdata/list.json")
	require.NoError(t, err)
	require.Len(t, m.Pods, 3)
	assert.Equal(t, []string{"team-a/app-1", "team-b/intruder", "default/json-pod"}, podNames(m))
	assert.Len(t, m.Secrets, 1)
	assert.Len(t, m.ServiceAccounts, 1)

	s := m.Secrets[types.NamespacedName{Namespace: "team-a", Name: "regcred"}]
	require.NotNil(t, s)
	assert.Equal(t, podworkers.DerivedUID("Secret", "team-a", "regcred"), s.UID, "a missing uid is derived")
	assert.Equal(t, types.UID("given-uid"), m.Pods[2].UID, "a given uid is kept")
	assert.Equal(t, "default", m.Pods[2].Namespace)

	again, err := podworkers.LoadFiles("testdata/tenants.yaml")
	require.NoError(t, err)
	assert.Equal(t, m.Pods[0].UID, again.Pods[0].UID, "derived uids are stable across runs")
	assert.NotEqual(t, podworkers.DerivedUID("Secret", "team-a", "regcred"), podworkers.DerivedUID("Secret", "team-b", "regcred"))
	assert.NotEqual(t, podworkers.DerivedUID("Secret", "a", "b"), podworkers.DerivedUID("Pod", "a", "b"))
}

func podNames(m *podworkers.Manifests) []string {
	var out []string
	for _, p := range m.Pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func TestLoadFilesRejects(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string // all must appear in the error
	}{
		{name: "invalid yaml", content: "kind: Pod\n  metadata: [", want: []string{"bad.yaml", "document 1"}},
		{name: "unknown kind", content: "apiVersion: v1\nkind: Frobnicator\nmetadata: {name: x}\n", want: []string{"bad.yaml", "Frobnicator"}},
		{name: "unsupported kind", content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", want: []string{"document 1", "ConfigMap", "not supported"}},
		{name: "unknown field", content: "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: a, imagePullPolcy: Always}]\n", want: []string{"bad.yaml", "imagePullPolcy"}},
		{name: "no name", content: "apiVersion: v1\nkind: Secret\nmetadata: {namespace: a}\n", want: []string{"Secret has no metadata.name"}},
		{name: "no containers", content: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {}\n", want: []string{"Pod default/p", "spec.containers must not be empty"}},
		{name: "no image", content: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n", want: []string{"spec.containers[0].image is required"}},
		{name: "bad pull policy", content: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {initContainers: [{name: i, image: a, imagePullPolicy: Sometimes}], containers: [{name: c, image: a}]}\n", want: []string{"spec.initContainers[0].imagePullPolicy", "Sometimes"}},
		{name: "duplicate pod", content: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: a}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: a}]}\n", want: []string{"document 2", "defined twice"}},
		{name: "second document bad", content: "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: Opaque\ndata: {x: '!!notbase64'}\n", want: []string{"document 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o600))
			_, err := podworkers.LoadFiles(path)
			require.ErrorIs(t, err, podworkers.ErrInvalidManifest)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	_, err := podworkers.LoadFiles(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorContains(t, err, "missing.yaml")
	_, err = podworkers.LoadFiles()
	assert.Error(t, err)
}

func TestDefaultPullPolicy(t *testing.T) {
	tests := []struct {
		image string
		set   corev1.PullPolicy
		want  corev1.PullPolicy
	}{
		{image: "alpine", want: corev1.PullAlways},
		{image: "alpine:latest", want: corev1.PullAlways},
		{image: "alpine:3.19", want: corev1.PullIfNotPresent},
		{image: "registry.example:5000/app", want: corev1.PullAlways},
		{image: "registry.example:5000/app:v1", want: corev1.PullIfNotPresent},
		{image: "alpine@sha256:0123", want: corev1.PullIfNotPresent},
		{image: "alpine:latest@sha256:0123", want: corev1.PullIfNotPresent},
		{image: "alpine:3.19", set: corev1.PullNever, want: corev1.PullNever},
		{image: "alpine", set: corev1.PullIfNotPresent, want: corev1.PullIfNotPresent},
	}
	for _, tt := range tests {
		t.Run(tt.image+"/"+string(tt.set), func(t *testing.T) {
			assert.Equal(t, tt.want, podworkers.DefaultPullPolicy(tt.image, tt.set))
		})
	}
}
