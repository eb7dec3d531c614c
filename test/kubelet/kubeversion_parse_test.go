package kubelet

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRelease(t *testing.T) {
	tests := []struct {
		in      string
		want    kubeRelease
		wantErr bool
	}{
		{in: "1.31.14", want: kubeRelease{version: "v1.31.14", minor: 31}},
		{in: "v1.36.3", want: kubeRelease{version: "v1.36.3", minor: 36}},
		{in: "1.31", wantErr: true},
		{in: "v1.33.0-rc.1", wantErr: true},
		{in: "2.0.0", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseRelease(tt.in)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestReleaseGoMod: the throwaway module takes k8s.io/kubernetes's go and
// godebug lines and replaces each staging module with its release.
func TestReleaseGoMod(t *testing.T) {
	upstream := `module k8s.io/kubernetes

go 1.24.0

godebug default=go1.24

require (
	k8s.io/api v0.0.0
	github.com/spf13/cobra v1.8.1
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/kube-scheduler => ./staging/src/k8s.io/kube-scheduler
)
`
	path := filepath.Join(t.TempDir(), "go.mod")
	require.NoError(t, os.WriteFile(path, []byte(upstream), 0o644))
	got, err := releaseGoMod(path, kubeRelease{version: "v1.33.13", minor: 33})
	require.NoError(t, err)
	assert.Equal(t, `module pullguard-e2e/kubernetes-v1.33.13

go 1.24.0
godebug default=go1.24

require k8s.io/kubernetes v1.33.13

replace (
	k8s.io/api => k8s.io/api v0.33.13
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.33.13
)
`, got)

	require.NoError(t, os.WriteFile(path, []byte("module k8s.io/kubernetes\n\ngo 1.22.0\n"), 0o644))
	_, err = releaseGoMod(path, kubeRelease{version: "v1.31.14", minor: 31})
	assert.ErrorContains(t, err, "no staging module replaced")
}
