package nodeconfig_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
)

const kcHead = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// TestSettingsAsTheKubelet: the kubelet's ValidateKubeletConfiguration
// (and defaulting) for every field pullguard reads, its verdicts written in
// as data; every error names the file or flag and the field.
func TestSettingsAsTheKubelet(t *testing.T) {
	tests := []struct {
		name    string
		file    string // after kcHead; "" for no file
		raw     string // the whole file, instead of kcHead+file
		flags   nodeconfig.Flags
		wantErr []string // fragments; nil when the kubelet accepts
		check   func(t *testing.T, s nodeconfig.Settings)
	}{
		{
			name:    "allowlist with the default policy",
			file:    "preloadedImagesVerificationAllowlist: [\"registry.example/*\"]\n",
			wantErr: []string{"kc.yaml", "preloadedImagesVerificationAllowlist cannot be set", `"NeverVerifyPreloadedImages"`},
		},
		{
			name:    "allowlist with AlwaysVerify",
			file:    "imagePullCredentialsVerificationPolicy: AlwaysVerify\npreloadedImagesVerificationAllowlist: [\"registry.example/*\"]\n",
			wantErr: []string{"kc.yaml", "preloadedImagesVerificationAllowlist cannot be set"},
		},
		{
			name: "allowlist with NeverVerifyAllowlistedImages",
			file: "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.example/*\"]\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.Equal(t, credtracker.NeverVerifyAllowlistedImages, s.Policy)
				assert.Equal(t, []string{"registry.example/*"}, s.Allowlist)
				assert.Empty(t, s.Warnings)
			},
		},
		{
			name: "allowlist with familiar names and a Docker Hub account's prefix",
			file: "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [ubuntu, \"bitnami/*\", library/busybox]\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.Equal(t, []string{"ubuntu", "bitnami/*", "library/busybox"}, s.Allowlist, "accepted, as the kubelet accepts them")
				assert.Empty(t, s.Warnings)
			},
		},
		{
			name: "allowlist prefix no repository name has",
			file: "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.example//*\"]\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.Equal(t, []string{"registry.example//*"}, s.Allowlist, "accepted, as the kubelet accepts it")
				require.Len(t, s.Warnings, 1)
				assert.Contains(t, s.Warnings[0], `"registry.example//*" never matches`)
			},
		},
		{
			name:    "allowlist name with a tag",
			file:    "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"ubuntu:24.04\"]\n",
			wantErr: []string{"kc.yaml", "preloadedImagesVerificationAllowlist[0]", "neither tag nor digest is accepted"},
		},
		{
			name: "the kubelet's other feature gates are left to the kubelet",
			file: "featureGates: {GracefulNodeShutdown: true, ImageVolume: true, KubeletEnsureSecretPulledImages: true}\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.True(t, s.Gates.EnsureSecretPulledImages)
				require.Len(t, s.Warnings, 1)
				assert.Contains(t, s.Warnings[0], "featureGates not used by pullguard: GracefulNodeShutdown, ImageVolume")
			},
		},
		{
			name: "AllBeta=false turns the beta gates off, as in the kubelet",
			file: "featureGates: {AllBeta: false}\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.False(t, s.Gates.EnsureSecretPulledImages)
				assert.False(t, s.Gates.ServiceAccountTokenForCredentialProviders)
				assert.Empty(t, s.Warnings)
			},
		},
		{
			name: "an unknown field: read leniently, as the kubelet reads v1beta1",
			file: "imagePullCredentialsVerificationPolicy: AlwaysVerify\nnoSuchField: 1\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.Equal(t, credtracker.AlwaysVerify, s.Policy)
				require.Len(t, s.Warnings, 2)
				assert.Contains(t, s.Warnings[0], "kc.yaml: read leniently, as the kubelet reads it")
				assert.Contains(t, s.Warnings[0], "noSuchField")
				assert.Contains(t, s.Warnings[1], "fields not used by pullguard: noSuchField")
			},
		},
		{
			name: "a duplicated field: read leniently, the last one wins",
			file: "registryBurst: 3\nregistryBurst: 4\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.Equal(t, 4, s.RegistryBurst)
				require.NotEmpty(t, s.Warnings)
				assert.Contains(t, s.Warnings[0], "read leniently")
			},
		},
		{
			name:    "a field of the wrong type is still an error",
			file:    "registryBurst: many\n",
			wantErr: []string{"kc.yaml", "registryBurst"},
		},
		{
			name: "registryPullQPS 0 (no limit)",
			file: "registryPullQPS: 0\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.Zero(t, s.RegistryPullQPS)
			},
		},
		{
			name:    "invalid allowlist pattern",
			file:    "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.io/myorg/\"]\n",
			wantErr: []string{"kc.yaml", "preloadedImagesVerificationAllowlist[0]", "invalid reference format"},
		},
		{
			name:    "policy while the gate is off",
			file:    "featureGates: {KubeletEnsureSecretPulledImages: false}\nimagePullCredentialsVerificationPolicy: AlwaysVerify\n",
			wantErr: []string{"kc.yaml", "imagePullCredentialsVerificationPolicy must not be set if the KubeletEnsureSecretPulledImages feature gate is not enabled"},
		},
		{
			name:    "allowlist while the gate is off",
			file:    "featureGates: {KubeletEnsureSecretPulledImages: false}\npreloadedImagesVerificationAllowlist: [\"registry.example/*\"]\n",
			wantErr: []string{"kc.yaml", "preloadedImagesVerificationAllowlist must not be set if the KubeletEnsureSecretPulledImages feature gate is not enabled"},
		},
		{
			name:    "policy flag while the gate flag is off",
			flags:   nodeconfig.Flags{FeatureGates: "KubeletEnsureSecretPulledImages=false", Policy: "AlwaysVerify"},
			wantErr: []string{"--image-pull-credentials-verification-policy", "must not be set"},
		},
		{
			name:    "unknown policy",
			file:    "imagePullCredentialsVerificationPolicy: Sometimes\n",
			wantErr: []string{"kc.yaml", `imagePullCredentialsVerificationPolicy "Sometimes"`, "valid options are"},
		},
		{
			name: "maxParallelImagePulls 1 with serializeImagePulls true",
			file: "serializeImagePulls: true\nmaxParallelImagePulls: 1\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.True(t, s.SerializeImagePulls)
				assert.Equal(t, int32(1), s.MaxParallelImagePulls)
			},
		},
		{
			name: "maxParallelImagePulls above 1 alone turns serialization off (defaulting)",
			file: "maxParallelImagePulls: 3\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.False(t, s.SerializeImagePulls)
				assert.Equal(t, int32(3), s.MaxParallelImagePulls)
			},
		},
		{
			name:    "maxParallelImagePulls above 1 with serializeImagePulls true",
			file:    "serializeImagePulls: true\nmaxParallelImagePulls: 3\n",
			wantErr: []string{"kc.yaml", "maxParallelImagePulls cannot be larger than 1 unless serializeImagePulls is set to false"},
		},
		{
			name:    "maxParallelImagePulls 0",
			file:    "serializeImagePulls: false\nmaxParallelImagePulls: 0\n",
			wantErr: []string{"kc.yaml", "maxParallelImagePulls 0 must be a positive number"},
		},
		{
			name:    "negative registryPullQPS and registryBurst, both reported",
			file:    "registryPullQPS: -1\nregistryBurst: -2\n",
			wantErr: []string{"kc.yaml", "registryPullQPS -1 must not be a negative number", "registryBurst -2 must not be a negative number"},
		},
		{
			name:    "not a KubeletConfiguration",
			raw:     "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n",
			wantErr: []string{"kc.yaml", "not a KubeletConfiguration", `kind "CredentialProviderConfig"`},
		},
		{
			name:    "a pod manifest",
			raw:     "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
			wantErr: []string{"kc.yaml", "not a KubeletConfiguration", `apiVersion "v1"`},
		},
		{
			name: "endpoints from the file",
			file: "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.Equal(t, "unix:///run/containerd/containerd.sock", s.ImageEndpoint())
			},
		},
		{
			name:  "flags win over the file's endpoints",
			file:  "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\nimageServiceEndpoint: unix:///run/images.sock\n",
			flags: nodeconfig.Flags{ImageEndpoint: "unix:///run/flag-images.sock"},
			check: func(t *testing.T, s nodeconfig.Settings) {
				assert.Equal(t, "unix:///run/containerd/containerd.sock", s.ContainerRuntimeEndpoint)
				assert.Equal(t, "unix:///run/flag-images.sock", s.ImageEndpoint())
			},
		},
		{
			name: "a kubeadm-style file: unused fields are named in a warning",
			file: "cgroupDriver: systemd\nclusterDNS: [10.96.0.10]\nimageGCHighThresholdPercent: 85\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n",
			check: func(t *testing.T, s nodeconfig.Settings) {
				require.Len(t, s.Warnings, 1)
				assert.Contains(t, s.Warnings[0], "kc.yaml: fields not used by pullguard: cgroupDriver, clusterDNS, imageGCHighThresholdPercent")
				assert.NotContains(t, s.Warnings[0], "containerRuntimeEndpoint")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" || tt.raw != "" {
				path = filepath.Join(t.TempDir(), "kc.yaml")
				data := tt.raw
				if data == "" {
					data = kcHead + tt.file
				}
				require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
			}
			s, err := nodeconfig.LoadSettings(path, tt.flags)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, nodeconfig.ErrInvalidConfig)
				for _, w := range tt.wantErr {
					assert.Contains(t, err.Error(), w)
				}
				return
			}
			require.NoError(t, err)
			tt.check(t, s)
		})
	}
}
