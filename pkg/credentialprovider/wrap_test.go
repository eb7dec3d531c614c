package credentialprovider_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	configv1 "k8s.io/kubelet/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/pullguard/pullguard/featuregates"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

func ecrEntry() configv1.CredentialProvider {
	return configv1.CredentialProvider{
		Name:                 "ecr-credential-provider",
		MatchImages:          []string{"*.dkr.ecr.*.amazonaws.com", "*.dkr.ecr.*.amazonaws.com.cn"},
		DefaultCacheDuration: &metav1.Duration{Duration: 12 * time.Hour},
		APIVersion:           "credentialprovider.kubelet.k8s.io/v1",
		Args:                 []string{"get-credentials"},
		Env:                  []configv1.ExecEnvVar{{Name: "AWS_PROFILE", Value: "example_profile"}},
	}
}

// wrappedYAML is the entry of ecrEntry as WrapProvider rewrites it: the
// "after" of docs/serve.md ("Plugins that mint a token per call"), there
// in flow style.
const wrappedYAML = `apiVersion: credentialprovider.kubelet.k8s.io/v1
args:
- credential-provider
- --plugin
- ecr-credential-provider
- --default-cache-duration
- 12h0m0s
- --match-image
- '*.dkr.ecr.*.amazonaws.com'
- --match-image
- '*.dkr.ecr.*.amazonaws.com.cn'
- --
- get-credentials
defaultCacheDuration: 12h0m0s
env:
- name: AWS_PROFILE
  value: example_profile
matchImages:
- '*.dkr.ecr.*.amazonaws.com'
- '*.dkr.ecr.*.amazonaws.com.cn'
name: pullguard-ecr-credential-provider
`

// TestWrapProvider: the rewrite of a kubelet CredentialProviderConfig
// entry that `pullguard install` makes, its inverse, and the entries it
// leaves alone.
func TestWrapProvider(t *testing.T) {
	t.Run("the rewrite", func(t *testing.T) {
		orig := ecrEntry()
		got, err := cp.WrapProvider(orig, "")
		require.NoError(t, err)
		out, err := yaml.Marshal(got)
		require.NoError(t, err)
		assert.Equal(t, wrappedYAML, string(out))
		assert.Equal(t, ecrEntry(), orig, "the entry given is not modified")
		assert.Equal(t, "pullguard-ecr-credential-provider", cp.WrapperLink(orig.Name))
	})
	tests := []struct {
		name    string
		entry   configv1.CredentialProvider
		rootDir string
	}{
		{name: "args and env", entry: ecrEntry()},
		{name: "a root directory", entry: ecrEntry(), rootDir: "/srv/pullguard"},
		{name: "no args", entry: func() configv1.CredentialProvider { e := ecrEntry(); e.Args = nil; return e }()},
		{name: "args that look like flags", entry: func() configv1.CredentialProvider {
			e := ecrEntry()
			e.Args = []string{"--plugin", "evil", "--", "-v"}
			return e
		}()},
		{name: "no defaultCacheDuration", entry: func() configv1.CredentialProvider { e := ecrEntry(); e.DefaultCacheDuration = nil; return e }()},
	}
	for _, tt := range tests {
		t.Run("round trip/"+tt.name, func(t *testing.T) {
			wrapped, err := cp.WrapProvider(tt.entry, tt.rootDir)
			require.NoError(t, err)
			w, ok := cp.ParseWrapperArgs(wrapped.Args)
			require.True(t, ok)
			assert.Equal(t, tt.entry.Name, w.Plugin)
			assert.Equal(t, tt.entry.MatchImages, w.MatchImages)
			assert.Equal(t, tt.rootDir, w.RootDir)
			assert.Equal(t, len(tt.entry.Args), len(w.Args))
			if tt.entry.DefaultCacheDuration != nil {
				assert.Equal(t, tt.entry.DefaultCacheDuration.Duration, w.DefaultCacheDuration)
			}
			back, ok := cp.UnwrapProvider(wrapped)
			require.True(t, ok)
			assert.Equal(t, tt.entry, back)
			_, err = cp.WrapProvider(wrapped, tt.rootDir)
			assert.ErrorIs(t, err, cp.ErrNotWrappable, "wrapping twice")
		})
	}
	t.Run("service account token provider left alone", func(t *testing.T) {
		e := ecrEntry()
		e.TokenAttributes = &configv1.ServiceAccountTokenAttributes{ServiceAccountTokenAudience: "registry"}
		got, err := cp.WrapProvider(e, "")
		assert.ErrorIs(t, err, cp.ErrNotWrappable)
		assert.Equal(t, e, got)
	})
	t.Run("not wrapped: nothing to unwrap", func(t *testing.T) {
		for _, args := range [][]string{nil, {"get-credentials"}, {"credential-provider", "--plugin"}, {"credential-provider", "--plugin", "x"}, {"credential-provider", "--unknown", "x", "--"}} {
			e := ecrEntry()
			e.Args = args
			_, ok := cp.UnwrapProvider(e)
			assert.False(t, ok, "%q", args)
		}
	})
}

// TestWrappedConfigLoads: a configuration whose entries were wrapped is
// one the kubelet's rules accept (pullguard serve reads the same file),
// with the wrapper's link as the executable.
func TestWrappedConfigLoads(t *testing.T) {
	wrapped, err := cp.WrapProvider(ecrEntry(), "")
	require.NoError(t, err)
	cfg := configv1.CredentialProviderConfig{
		TypeMeta:  metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1", Kind: "CredentialProviderConfig"},
		Providers: []configv1.CredentialProvider{wrapped, ecrEntry()},
	}
	data, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	got, err := cp.Load(path, featuregates.Defaults())
	require.NoError(t, err)
	require.Len(t, got.Providers, 2)
	assert.Equal(t, "pullguard-ecr-credential-provider", got.Providers[0].Name)
	assert.Equal(t, "ecr-credential-provider", got.Providers[1].Name, "the wrapped and the plain entry have distinct names")
}
