package credentialprovider_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/featuregates"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

func TestLoadConfigFixtures(t *testing.T) {
	tests := []struct {
		name  string
		path  string
		names []string
		check func(t *testing.T, cfg *cp.Config)
	}{
		{
			name:  "v1 with args, env and tokenAttributes",
			path:  "testdata/config/v1.yaml",
			names: []string{"ecr-credential-provider", "sa-provider"},
			check: func(t *testing.T, cfg *cp.Config) {
				ecr := cfg.Providers[0]
				assert.Equal(t, []string{"*.dkr.ecr.*.amazonaws.com", "*.dkr.ecr.*.amazonaws.com.cn"}, ecr.MatchImages)
				assert.Equal(t, 12*time.Hour, ecr.DefaultCacheDuration)
				assert.Equal(t, []string{"get-credentials"}, ecr.Args)
				assert.Equal(t, []cp.EnvVar{{Name: "AWS_PROFILE", Value: "example_profile"}}, ecr.Env)
				assert.Nil(t, ecr.TokenAttributes)
				sa := cfg.Providers[1]
				assert.Equal(t, 1, sa.Index)
				assert.Equal(t, "testdata/config/v1.yaml", sa.File)
				require.NotNil(t, sa.TokenAttributes)
				assert.Equal(t, cp.TokenAttributes{
					Audience:               "registry.example",
					CacheType:              cp.TokenCacheServiceAccount,
					RequireServiceAccount:  true,
					RequiredAnnotationKeys: []string{"example.com/role"},
					OptionalAnnotationKeys: []string{"example.com/tier"},
				}, *sa.TokenAttributes)
			},
		},
		{
			name:  "v1beta1 JSON",
			path:  "testdata/config/v1beta1.json",
			names: []string{"gcr"},
			check: func(t *testing.T, cfg *cp.Config) {
				assert.Equal(t, "credentialprovider.kubelet.k8s.io/v1beta1", cfg.Providers[0].APIVersion)
				assert.Equal(t, 10*time.Minute, cfg.Providers[0].DefaultCacheDuration)
			},
		},
		{
			name:  "v1alpha1",
			path:  "testdata/config/v1alpha1.yaml",
			names: []string{"acr"},
		},
		{
			name:  "directory in file-name order, dot files skipped",
			path:  "testdata/config/dir",
			names: []string{"first-a", "first-b", "second"},
			check: func(t *testing.T, cfg *cp.Config) {
				assert.Equal(t, filepath.Join("testdata/config/dir", "20-second.yaml"), cfg.Providers[2].File)
				assert.Equal(t, 0, cfg.Providers[2].Index)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := cp.LoadConfig(tt.path)
			require.NoError(t, err)
			var names []string
			for _, p := range cfg.Providers {
				names = append(names, p.Name)
			}
			assert.Equal(t, tt.names, names)
			if tt.check != nil {
				tt.check(t, cfg)
			}
		})
	}
}

const v1Head = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"

// provider returns one v1 provider entry in YAML, with extra lines added.
func providerYAML(name string, extra string) string {
	return "  - name: " + name + "\n" +
		"    matchImages: [\"registry.example\"]\n" +
		"    defaultCacheDuration: 1m\n" +
		"    apiVersion: credentialprovider.kubelet.k8s.io/v1\n" + extra
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string // written into a directory; one file is loaded as a file
		wantErr []string          // substrings of the error
	}{
		{
			name:    "unknown field is rejected by strict decoding",
			files:   map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("p", "    bogusField: 1\n")},
			wantErr: []string{"c.yaml", "bogusField"},
		},
		{
			name:    "duplicate field is rejected",
			files:   map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("p", "    name: q\n")},
			wantErr: []string{"c.yaml", "name"},
		},
		{
			name:    "wrong kind",
			files:   map[string]string{"c.yaml": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"},
			wantErr: []string{"kind", "KubeletConfiguration"},
		},
		{
			name:    "unknown apiVersion",
			files:   map[string]string{"c.yaml": "apiVersion: kubelet.config.k8s.io/v9\nkind: CredentialProviderConfig\nproviders: []\n"},
			wantErr: []string{"c.yaml", "cannot decode"},
		},
		{
			name:    "empty file",
			files:   map[string]string{"c.yaml": "\n"},
			wantErr: []string{"c.yaml", "empty"},
		},
		{
			name:    "no providers",
			files:   map[string]string{"c.yaml": v1Head + "providers: []\n"},
			wantErr: []string{"providers: Required value"},
		},
		{
			name: "missing name, apiVersion, matchImages and defaultCacheDuration",
			files: map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("ok", "") +
				"  - args: []\n"},
			wantErr: []string{"providers[1].name: Required", "providers[1].apiVersion: Required", "providers[1].matchImages: Required", "providers[1].defaultCacheDuration: Required"},
		},
		{
			name:    "name with a path separator",
			files:   map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("../evil", "")},
			wantErr: []string{"providers[0].name", "path separator"},
		},
		{
			name:    "name dot-dot",
			files:   map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("..", "")},
			wantErr: []string{"providers[0].name", "file name"},
		},
		{
			name:    "name with a space",
			files:   map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("'my plugin'", "")},
			wantErr: []string{"providers[0].name", "spaces"},
		},
		{
			name:    "duplicate names in one file",
			files:   map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("p", "") + providerYAML("p", "")},
			wantErr: []string{"providers[1].name", "unique", "providers[0]"},
		},
		{
			name: "duplicate names across files name both files",
			files: map[string]string{
				"10.yaml": v1Head + "providers:\n" + providerYAML("p", ""),
				"20.yaml": v1Head + "providers:\n" + providerYAML("p", ""),
			},
			wantErr: []string{"20.yaml", "providers[0].name", "10.yaml"},
		},
		{
			name: "unsupported request apiVersion",
			files: map[string]string{"c.yaml": v1Head + "providers:\n  - name: p\n    matchImages: [a.example]\n" +
				"    defaultCacheDuration: 1m\n    apiVersion: credentialprovider.kubelet.k8s.io/v2\n"},
			wantErr: []string{"providers[0].apiVersion", "Unsupported value"},
		},
		{
			name: "bad match images are named by index",
			files: map[string]string{"c.yaml": v1Head + "providers:\n  - name: p\n    defaultCacheDuration: 1m\n" +
				"    apiVersion: credentialprovider.kubelet.k8s.io/v1\n" +
				"    matchImages: [\"ok.example\", \"reg example\", \"reg.example/team/*\", \"https://reg.example\", \"reg.example:http\", \"\", \"reg.example/app:v1\"]\n"},
			// As the kubelet: an entry is invalid when net/url cannot parse
			// "https://" + entry. matchImages[2] and [3] never match and
			// are warnings (TestNeverMatchingEntriesWarn); [5] and [6] are
			// valid.
			wantErr: []string{"providers[0].matchImages[1]", `invalid character " " in host name`, "providers[0].matchImages[4]", `invalid port ":http" after host`},
		},
		{
			name: "negative default cache duration",
			files: map[string]string{"c.yaml": v1Head + "providers:\n  - name: p\n    matchImages: [a.example]\n" +
				"    defaultCacheDuration: -1m\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n"},
			wantErr: []string{"providers[0].defaultCacheDuration", "negative"},
		},
		{
			name:    "env without a name",
			files:   map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("p", "    env:\n      - name: \"\"\n        value: v\n")},
			wantErr: []string{"providers[0].env[0].name: Required"},
		},
		{
			name: "tokenAttributes need audience, requireServiceAccount and cacheType",
			files: map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("p",
				"    tokenAttributes:\n      requiredServiceAccountAnnotationKeys: [a.example/x]\n")},
			wantErr: []string{"providers[0].tokenAttributes.serviceAccountTokenAudience: Required", "providers[0].tokenAttributes.requireServiceAccount: Required", "providers[0].tokenAttributes.cacheType: Required"},
		},
		{
			name: "required annotations need requireServiceAccount",
			files: map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("p",
				"    tokenAttributes:\n      serviceAccountTokenAudience: aud\n      cacheType: Token\n      requireServiceAccount: false\n      requiredServiceAccountAnnotationKeys: [a.example/x]\n")},
			wantErr: []string{"providers[0].tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden"},
		},
		{
			name: "annotation keys invalid, duplicated, and both required and optional",
			files: map[string]string{"c.yaml": v1Head + "providers:\n" + providerYAML("p",
				"    tokenAttributes:\n      serviceAccountTokenAudience: aud\n      cacheType: Bogus\n      requireServiceAccount: true\n"+
					"      requiredServiceAccountAnnotationKeys: [a.example/x, a.example/x, \"bad key!\"]\n"+
					"      optionalServiceAccountAnnotationKeys: [a.example/x]\n")},
			wantErr: []string{
				"requiredServiceAccountAnnotationKeys[1]: Duplicate",
				"requiredServiceAccountAnnotationKeys[2]: Invalid",
				"optionalServiceAccountAnnotationKeys[0]", "also in requiredServiceAccountAnnotationKeys",
				"cacheType: Unsupported value",
			},
		},
		{
			name: "tokenAttributes only with request v1",
			files: map[string]string{"c.yaml": v1Head + "providers:\n  - name: p\n    matchImages: [a.example]\n    defaultCacheDuration: 1m\n" +
				"    apiVersion: credentialprovider.kubelet.k8s.io/v1beta1\n" +
				"    tokenAttributes:\n      serviceAccountTokenAudience: aud\n      cacheType: Token\n      requireServiceAccount: true\n"},
			wantErr: []string{"providers[0].tokenAttributes: Forbidden", "only supported with apiVersion credentialprovider.kubelet.k8s.io/v1"},
		},
		{
			name: "tokenAttributes do not exist before v1",
			files: map[string]string{"c.yaml": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\nproviders:\n" +
				providerYAML("p", "    tokenAttributes:\n      serviceAccountTokenAudience: aud\n")},
			wantErr: []string{"tokenAttributes"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tt.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600))
			}
			path := dir
			if len(tt.files) == 1 {
				for name := range tt.files {
					path = filepath.Join(dir, name)
				}
			}
			_, err := cp.LoadConfig(path)
			require.Error(t, err)
			assert.ErrorIs(t, err, cp.ErrInvalidConfig)
			for _, want := range tt.wantErr {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestLoadConfigPathErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{name: "empty path", path: "", wantErr: "no path"},
		{name: "missing file", path: filepath.Join(dir, "nope.yaml"), wantErr: "nope.yaml"},
		{name: "empty directory", path: dir, wantErr: "no configuration files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cp.LoadConfig(tt.path)
			require.Error(t, err)
			assert.ErrorIs(t, err, cp.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestValidateGate(t *testing.T) {
	cfg, err := cp.LoadConfig("testdata/config/v1.yaml")
	require.NoError(t, err)
	tests := []struct {
		name    string
		gates   featuregates.Gates
		wantErr string
	}{
		{name: "gate on", gates: featuregates.Gates{ServiceAccountTokenForCredentialProviders: true}},
		{name: "gate off forbids tokenAttributes", gates: featuregates.Gates{}, wantErr: "providers[1].tokenAttributes: Forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := cfg.Validate(tt.gates)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, cp.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.Contains(t, err.Error(), "v1.yaml")
		})
	}
}

func TestLoadConfigNeverQuotesEnvValues(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	data := v1Head + "providers:\n" + providerYAML("p", "    env:\n      - name: TOKEN\n        value: s3cr3t-env-value\n") + "  - name: \"\"\n"
	require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
	_, err := cp.LoadConfig(path)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cr3t-env-value")
}
