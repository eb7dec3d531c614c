package featuregates_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/featuregates"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name       string
		fromConfig map[string]bool
		flag       string
		want       featuregates.Gates
		wantErr    string
	}{
		{
			name: "defaults follow the kubelet at the emulation version",
			want: featuregates.Gates{EnsureSecretPulledImages: true, ServiceAccountTokenForCredentialProviders: true},
		},
		{
			name: "flag turns the protection off",
			flag: "KubeletEnsureSecretPulledImages=false",
			want: featuregates.Gates{EnsureSecretPulledImages: false, ServiceAccountTokenForCredentialProviders: true},
		},
		{
			name:       "config map turns a gate off",
			fromConfig: map[string]bool{"KubeletServiceAccountTokenForCredentialProviders": false},
			want:       featuregates.Gates{EnsureSecretPulledImages: true, ServiceAccountTokenForCredentialProviders: false},
		},
		{
			name:       "flag overrides config",
			fromConfig: map[string]bool{"KubeletEnsureSecretPulledImages": false},
			flag:       "KubeletEnsureSecretPulledImages=true",
			want:       featuregates.Gates{EnsureSecretPulledImages: true, ServiceAccountTokenForCredentialProviders: true},
		},
		{
			name: "both gates in one flag, with spaces",
			flag: "KubeletEnsureSecretPulledImages=false, KubeletServiceAccountTokenForCredentialProviders=false",
			want: featuregates.Gates{},
		},
		{
			name:    "unknown gate in flag is named",
			flag:    "NoSuchGate=true",
			wantErr: "NoSuchGate",
		},
		{
			name:    "malformed flag value is named",
			flag:    "KubeletEnsureSecretPulledImages=maybe",
			wantErr: "KubeletEnsureSecretPulledImages",
		},
		{
			name:       "unknown gate in config is named",
			fromConfig: map[string]bool{"Bogus": true},
			wantErr:    "Bogus",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := featuregates.Parse(tt.fromConfig, tt.flag)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDefaultsAndKnown(t *testing.T) {
	assert.Equal(t, featuregates.Gates{EnsureSecretPulledImages: true, ServiceAccountTokenForCredentialProviders: true}, featuregates.Defaults())
	assert.Equal(t, []string{"KubeletEnsureSecretPulledImages", "KubeletServiceAccountTokenForCredentialProviders"}, featuregates.Known())
}

func TestVersionedSpecs(t *testing.T) {
	fg, err := featuregates.NewFeatureGate()
	require.NoError(t, err)
	all := fg.GetAllVersioned()
	ensure := all[featuregates.EnsureSecretPulledImages]
	require.Len(t, ensure, 2)
	assert.Equal(t, "1.33", ensure[0].Version.String())
	assert.False(t, ensure[0].Default)
	assert.Equal(t, "1.35", ensure[1].Version.String())
	assert.True(t, ensure[1].Default)
}

// TestSplit: of a KubeletConfiguration's featureGates, pullguard reads its
// own gates and the AllAlpha/AllBeta switches, and names the others (the
// kubelet's to check).
func TestSplit(t *testing.T) {
	tests := []struct {
		name       string
		in         map[string]bool
		wantMine   map[string]bool
		wantOthers []string
	}{
		{name: "none"},
		{
			name:       "the kubelet's gates beside pullguard's",
			in:         map[string]bool{"KubeletEnsureSecretPulledImages": false, "GracefulNodeShutdown": true, "ImageVolume": true},
			wantMine:   map[string]bool{"KubeletEnsureSecretPulledImages": false},
			wantOthers: []string{"GracefulNodeShutdown", "ImageVolume"},
		},
		{
			name:     "the global switches are read",
			in:       map[string]bool{"AllBeta": false, "AllAlpha": true},
			wantMine: map[string]bool{"AllBeta": false, "AllAlpha": true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mine, others := featuregates.Split(tt.in)
			assert.Equal(t, tt.wantMine, mine)
			assert.Equal(t, tt.wantOthers, others)
			_, err := featuregates.Parse(mine, "")
			assert.NoError(t, err)
		})
	}
}
