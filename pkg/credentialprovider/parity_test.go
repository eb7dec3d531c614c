package credentialprovider_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/featuregates"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// TestTokenAsPasswordRefused: a plugin in service-account-token mode that
// hands back the pod's own token as the password is refused (the kubelet
// refuses it: the token is bound to one pod), nothing is cached, and the
// error never holds the token.
func TestTokenAsPasswordRefused(t *testing.T) {
	tokens := fakeTokens{"ns/builder": {UID: "uid-builder"}}
	for _, cacheType := range []cp.TokenCacheType{cp.TokenCacheServiceAccount, cp.TokenCacheToken} {
		t.Run(string(cacheType), func(t *testing.T) {
			e := newEnv(t)
			p := e.provider("sa", []string{"registry.example"}, time.Hour, "-mode", "token-as-password")
			p.TokenAttributes = &cp.TokenAttributes{Audience: "registry.example", CacheType: cacheType, RequireServiceAccount: true}
			m := e.manager(t, []cp.Provider{p}, cp.WithServiceAccountTokenSource(tokens))
			for _, pod := range []string{"pod1", "pod2"} {
				got, err := m.ForPod(cp.PodInfo{Namespace: "ns", Name: pod, UID: pod + "-uid", ServiceAccountName: "builder"}).Lookup(bg, "registry.example/app")
				require.Error(t, err, pod)
				assert.Empty(t, got, "no credential from a refused response")
				assert.NotContains(t, err.Error(), "token-for-", "the error holds the token")
			}
			entries, _ := m.CacheSize("sa")
			assert.Zero(t, entries, "a refused response is not cached")
		})
	}
}

// TestConfigDirectoryAsTheKubelet: in a directory the kubelet
// (readCredentialProviderConfig) reads every *.json, *.yaml and *.yml entry
// that is not a directory, dot files too, in name order; a README (or any
// other file) is ignored, and a directory with none of them is an error.
// An entry that is not a regular file once links are followed fails the
// kubelet (a FIFO holds it for ever), so it is an error here, at once.
func TestConfigDirectoryAsTheKubelet(t *testing.T) {
	provider := func(name string) string {
		return "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: " + name +
			"\n  matchImages: [\"registry.example\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
	}
	tests := []struct {
		name      string
		files     map[string]string
		setup     func(t *testing.T, dir string) // after files are written
		wantNames []string
		wantErr   string
	}{
		{
			name:      "README and other files are ignored",
			files:     map[string]string{"README": "not yaml: [", "notes.txt": "x", "10-a.yaml": provider("a"), "20-b.yml": provider("b"), "30-c.json": `{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"c","matchImages":["registry.example"],"defaultCacheDuration":"1m","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}`},
			wantNames: []string{"a", "b", "c"},
		},
		{
			name:    "only a README",
			files:   map[string]string{"README.md": "# providers"},
			wantErr: "no configuration files",
		},
		{
			name:      "a dot file is read",
			files:     map[string]string{".hidden.yaml": provider("a")},
			wantNames: []string{"a"},
		},
		{
			name:      "a directory named like a file is skipped",
			files:     map[string]string{"a.yaml": provider("a")},
			setup:     func(t *testing.T, dir string) { require.NoError(t, os.Mkdir(filepath.Join(dir, "b.yaml"), 0o700)) },
			wantNames: []string{"a"},
		},
		{
			name: "a link to a file is read",
			setup: func(t *testing.T, dir string) {
				target := filepath.Join(t.TempDir(), "c.yaml")
				require.NoError(t, os.WriteFile(target, []byte(provider("a")), 0o600))
				require.NoError(t, os.Symlink(target, filepath.Join(dir, "a.yaml")))
			},
			wantNames: []string{"a"},
		},
		{
			name:  "a link to a directory",
			files: map[string]string{"a.yaml": provider("a")},
			setup: func(t *testing.T, dir string) {
				require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(dir, "b.yaml")))
			},
			wantErr: `"b.yaml" in directory`,
		},
		{
			name:  "a FIFO",
			files: map[string]string{"a.yaml": provider("a")},
			setup: func(t *testing.T, dir string) {
				require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "b.json"), 0o600))
			},
			wantErr: `"b.json" in directory`,
		},
		{
			name:  "a dangling link",
			files: map[string]string{"a.yaml": provider("a")},
			setup: func(t *testing.T, dir string) {
				require.NoError(t, os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "b.yml")))
			},
			wantErr: "b.yml",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tt.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600))
			}
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			cfg, err := cp.LoadConfig(dir)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, cp.ErrInvalidConfig)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			var names []string
			for _, p := range cfg.Providers {
				names = append(names, p.Name)
			}
			assert.Equal(t, tt.wantNames, names)
		})
	}
}

// TestPathWildcardWarns: the kubelet loads a matchImages entry such as
// "registry.io/*" and never matches it. pullguard loads it as well, never
// matches it, and reports it in Config.Warnings (decision: warn, not
// refuse, so that a configuration the kubelet runs also runs here).
func TestNeverMatchingEntriesWarn(t *testing.T) {
	data := []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: good\n" +
		"  matchImages: [\"registry.io/*\", \"registry.example\", \"https://registry.io\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n")
	cfg, err := cp.Decode("inline.yaml", data, testGates(t))
	require.NoError(t, err)
	require.Len(t, cfg.Warnings, 2)
	assert.Contains(t, cfg.Warnings[0], `providers[0].matchImages[0] "registry.io/*"`)
	assert.Contains(t, cfg.Warnings[0], `its path "/*" holds '*'`)
	assert.Contains(t, cfg.Warnings[0], `"inline.yaml"`)
	assert.Contains(t, cfg.Warnings[1], `providers[0].matchImages[2] "https://registry.io"`)
	assert.Contains(t, cfg.Warnings[1], `its path "//registry.io" holds "//"`)

	e := newEnv(t)
	p := e.provider("good", []string{"registry.io/*", "registry.example", "https://registry.io"}, time.Hour)
	m := e.manager(t, []cp.Provider{p})
	for _, image := range []string{"registry.io/app:v1", "registry.io/*/app"} {
		got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, image)
		if image == "registry.io/*/app" {
			require.ErrorIs(t, err, keyring.ErrInvalidImage, "no repository holds a '*'")
			continue
		}
		require.NoError(t, err)
		assert.Empty(t, got, "the path wildcard and the scheme never match, as in the kubelet")
	}
	got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app:v1")
	require.NoError(t, err)
	assert.Len(t, got, 1)
}

// TestDecodeAppliesGates: Decode and Load apply the feature-gate rules, so
// there is no second step to forget.
func TestDecodeAppliesGates(t *testing.T) {
	data := []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: sa\n" +
		"  matchImages: [\"registry.example\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n" +
		"  tokenAttributes:\n    serviceAccountTokenAudience: registry.example\n    cacheType: Token\n    requireServiceAccount: true\n")
	gates := testGates(t)
	_, err := cp.Decode("inline.yaml", data, gates)
	require.NoError(t, err)
	gates.ServiceAccountTokenForCredentialProviders = false
	_, err = cp.Decode("inline.yaml", data, gates)
	require.ErrorIs(t, err, cp.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "providers[0].tokenAttributes")

	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, data, 0o600))
	_, err = cp.Load(file, gates)
	require.ErrorIs(t, err, cp.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "providers[0].tokenAttributes")
}

func testGates(t *testing.T) featuregates.Gates {
	t.Helper()
	g := featuregates.Defaults()
	g.ServiceAccountTokenForCredentialProviders = true
	return g
}
