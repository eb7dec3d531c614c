package nodeconfig_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
)

// TestResolveServeSettings: serve's gate comes from its own flags only;
// the kubelet file's gate never turns serve's protection off.
func TestResolveServeSettings(t *testing.T) {
	tests := []struct {
		name        string
		cfg         *kubeletconfig.KubeletConfiguration
		flags       nodeconfig.Flags
		wantOn      bool
		wantPolicy  credtracker.Policy
		wantAllow   []string
		wantErr     string
		wantWarning string
	}{
		{name: "no file", wantOn: true, wantPolicy: credtracker.NeverVerifyPreloadedImages},
		{
			name:       "the kubelet's gate off",
			cfg:        &kubeletconfig.KubeletConfiguration{FeatureGates: map[string]bool{"KubeletEnsureSecretPulledImages": false}},
			wantOn:     true,
			wantPolicy: credtracker.NeverVerifyPreloadedImages,
		},
		{
			name:       "AllBeta off in the kubelet's file",
			cfg:        &kubeletconfig.KubeletConfiguration{FeatureGates: map[string]bool{"AllBeta": false}},
			wantOn:     true,
			wantPolicy: credtracker.NeverVerifyPreloadedImages,
		},
		{
			name:       "the kubelet's gate off, serve's policy flag",
			cfg:        &kubeletconfig.KubeletConfiguration{FeatureGates: map[string]bool{"KubeletEnsureSecretPulledImages": false}},
			flags:      nodeconfig.Flags{Policy: "AlwaysVerify"},
			wantOn:     true,
			wantPolicy: credtracker.AlwaysVerify,
		},
		{
			name: "policy and allowlist from the kubelet's file",
			cfg: &kubeletconfig.KubeletConfiguration{
				ImagePullCredentialsVerificationPolicy: "NeverVerifyAllowlistedImages",
				PreloadedImagesVerificationAllowlist:   []string{"registry.example/base/*"},
			},
			wantOn:     true,
			wantPolicy: credtracker.NeverVerifyAllowlistedImages,
			wantAllow:  []string{"registry.example/base/*"},
		},
		{
			name:   "pass-through asked on serve's command line",
			cfg:    &kubeletconfig.KubeletConfiguration{ImagePullCredentialsVerificationPolicy: "AlwaysVerify"},
			flags:  nodeconfig.Flags{FeatureGates: "KubeletEnsureSecretPulledImages=false"},
			wantOn: false,
		},
		{
			name:    "pass-through with a policy flag",
			flags:   nodeconfig.Flags{FeatureGates: "KubeletEnsureSecretPulledImages=false", Policy: "AlwaysVerify"},
			wantErr: "--image-pull-credentials-verification-policy",
		},
		{
			name:        "the kubelet's other gates are left to it",
			cfg:         &kubeletconfig.KubeletConfiguration{FeatureGates: map[string]bool{"RotateKubeletServerCertificate": true}},
			wantOn:      true,
			wantPolicy:  credtracker.NeverVerifyPreloadedImages,
			wantWarning: "RotateKubeletServerCertificate",
		},
		{name: "bad gate flag", flags: nodeconfig.Flags{FeatureGates: "NoSuchGate=true"}, wantErr: "NoSuchGate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before map[string]bool
			if tt.cfg != nil {
				before = map[string]bool{}
				for k, v := range tt.cfg.FeatureGates {
					before[k] = v
				}
			}
			s, err := nodeconfig.ResolveServeSettings(tt.cfg, tt.flags)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantOn, s.Gates.EnsureSecretPulledImages)
			assert.Equal(t, tt.wantPolicy, s.Policy)
			assert.Equal(t, tt.wantAllow, s.Allowlist)
			if tt.wantWarning != "" {
				assert.Contains(t, s.Warnings, "the kubelet configuration: featureGates not used by pullguard: "+tt.wantWarning)
			}
			if tt.cfg != nil && len(before) > 0 {
				assert.Equal(t, before, tt.cfg.FeatureGates, "the caller's configuration is not changed")
			}
		})
	}
}
