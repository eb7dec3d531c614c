package keyring_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

func TestFromSecretsCandidateOrder(t *testing.T) {
	h := testHasher(t)
	// Listed least specific first on purpose: the order must come from the
	// patterns, with secret order and file order only breaking ties.
	first := dockerConfigJSONSecret("team-a", "first", []byte(`{"auths":{
		"*.*.example":        {"username":"wild2","password":"pw-s3cret-Qz8"},
		"*.r.example":        {"username":"wild1","password":"pw-s3cret-Qz8"},
		"a.r.example":        {"username":"host-first","password":"pw-s3cret-Qz8"},
		"*.r.example/team":   {"username":"wild-path","password":"pw-s3cret-Qz8"}
	}}`))
	second := dockercfgSecret("team-a", "second", []byte(`{
		"https://a.r.example":        {"username":"host-second","password":"pw-s3cret-Qz8"},
		"a.r.example/team/app":       {"username":"path2","password":"pw-s3cret-Qz8"},
		"a.r.example/team":           {"username":"path1","password":"pw-s3cret-Qz8"},
		"a.r.example/teammate":       {"username":"not-a-prefix","password":"pw-s3cret-Qz8"},
		"a.r.example:5000":           {"username":"other-port","password":"pw-s3cret-Qz8"}
	}`))
	kr, errs := keyring.FromSecrets(h, []*corev1.Secret{first, second})
	require.Empty(t, errs)

	got, err := kr.Lookup(context.Background(), "A.R.example/team/app:v1")
	require.NoError(t, err)
	users := make([]string, 0, len(got))
	for _, c := range got {
		users = append(users, c.Auth.Username)
		assert.Equal(t, "a.r.example", c.Registry)
	}
	assert.Equal(t, []string{
		"path2",       // exact host, two path segments
		"path1",       // exact host, one path segment
		"host-first",  // exact host, no path: first secret...
		"host-second", // ...before the second
		"wild-path",   // wildcard host with a path
		"wild1",       // wildcard host, more literal characters
		"wild2",
	}, users)
	assertHashes(t, h, got)
	assert.Equal(t, secretSource("team-a", "second"), got[0].Source)
	assert.Equal(t, secretSource("team-a", "first"), got[2].Source)
}

func TestFromSecretsDeduplicates(t *testing.T) {
	h := testHasher(t)
	same := `{"username":"alice","password":"pw-s3cret-Qz8"}`
	a := dockerConfigJSONSecret("ns", "a", []byte(`{"auths":{"*.example":`+same+`,"r.example":`+same+`}}`))
	b := dockerConfigJSONSecret("ns", "b", []byte(`{"auths":{"r.example/team":`+same+`}}`))
	kr, errs := keyring.FromSecrets(h, []*corev1.Secret{a, b})
	require.Empty(t, errs)

	got, err := kr.Lookup(context.Background(), "r.example/team/app")
	require.NoError(t, err)
	require.Len(t, got, 1, "one credential, tried once")
	assert.Equal(t, secretSource("ns", "b"), got[0].Source, "the most specific match is kept")
	assertHashes(t, h, got)
}

func TestFromSecretsMalformedSecretsAreSkipped(t *testing.T) {
	h := testHasher(t)
	good := dockerConfigJSONSecret("ns", "good", []byte(`{"auths":{"r.example":{"username":"good","password":"pw-s3cret-Qz8"}}}`))
	stringData := &corev1.Secret{
		ObjectMeta: good.ObjectMeta,
		Type:       corev1.SecretTypeDockerConfigJson,
		StringData: map[string]string{corev1.DockerConfigJsonKey: `{"auths":{"r.example":{"username":"from-string-data","password":"pw-old-Vb3"}}}`},
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`not json pw-s3cret-Qz8`)},
	}
	stringData.Name = "string-data"
	partlyBad := dockercfgSecret("ns", "partly-bad", []byte(`{
		"r.example/*":{"username":"skipped","password":"pw-s3cret-Qz8"},
		"r.example":{"username":"kept","password":"pw-legacy-Tt1"}}`))

	tests := []struct {
		name      string
		secret    *corev1.Secret
		wantErr   error
		wantField string
	}{
		{
			name:      "bad JSON",
			secret:    dockerConfigJSONSecret("ns", "bad-json", []byte(`{"auths":{"r.example":{"password":"pw-s3cret-Qz8"`)),
			wantErr:   keyring.ErrInvalidDockerConfig,
			wantField: "data[.dockerconfigjson]",
		},
		{
			name:      "bad base64 auth",
			secret:    dockerConfigJSONSecret("ns", "bad-auth", []byte(`{"auths":{"r.example":{"auth":"pw-s3cret-Qz8!"}}}`)),
			wantErr:   keyring.ErrInvalidDockerConfig,
			wantField: "data[.dockerconfigjson]",
		},
		{
			name: "wrong type",
			secret: func() *corev1.Secret {
				s := dockerConfigJSONSecret("ns", "opaque", []byte(`{"auths":{}}`))
				s.Type = corev1.SecretTypeOpaque
				return s
			}(),
			wantErr:   keyring.ErrUnsupportedSecretType,
			wantField: "type",
		},
		{
			name: "missing data key",
			secret: func() *corev1.Secret {
				s := dockerConfigJSONSecret("ns", "missing", nil)
				s.Data = map[string][]byte{corev1.DockerConfigKey: []byte(`{}`)}
				return s
			}(),
			wantErr:   keyring.ErrMissingSecretData,
			wantField: "data[.dockerconfigjson]",
		},
		{
			name:      "empty data",
			secret:    dockercfgSecret("ns", "empty", []byte{}),
			wantErr:   keyring.ErrMissingSecretData,
			wantField: "data[.dockercfg]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kr, errs := keyring.FromSecrets(h, []*corev1.Secret{tt.secret, nil, good})
			require.Len(t, errs, 1)
			err := errs[0]
			assert.ErrorIs(t, err, tt.wantErr)
			var serr *keyring.SecretError
			require.ErrorAs(t, err, &serr)
			assert.Equal(t, tt.secret.Namespace, serr.Namespace)
			assert.Equal(t, tt.secret.Name, serr.Name)
			assert.Equal(t, string(tt.secret.UID), serr.UID)
			assert.Equal(t, tt.wantField, serr.Field)
			assertNoSecrets(t, err.Error())
			if !t.Failed() {
				assert.Contains(t, err.Error(), "pull secret ns/"+tt.secret.Name+": "+tt.wantField)
			}

			got, lerr := kr.Lookup(context.Background(), "r.example/app")
			require.NoError(t, lerr)
			assert.Equal(t, []summary{{Registry: "r.example", Source: secretSource("ns", "good"), User: "good"}}, summarize(got),
				"the pod's other secret still works")
		})
	}

	t.Run("string data wins over data", func(t *testing.T) {
		kr, errs := keyring.FromSecrets(h, []*corev1.Secret{stringData})
		require.Empty(t, errs)
		got, err := kr.Lookup(context.Background(), "r.example/app")
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, "from-string-data", got[0].Auth.Username)
	})

	t.Run("invalid entry key skips only that entry", func(t *testing.T) {
		kr, errs := keyring.FromSecrets(h, []*corev1.Secret{partlyBad})
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0], keyring.ErrInvalidPattern)
		var serr *keyring.SecretError
		require.ErrorAs(t, errs[0], &serr)
		assert.Equal(t, `data[.dockercfg]["r.example/*"]`, serr.Field)
		assertNoSecrets(t, errs[0].Error())
		got, err := kr.Lookup(context.Background(), "r.example/app")
		require.NoError(t, err)
		assert.Equal(t, []summary{{Registry: "r.example", Source: secretSource("ns", "partly-bad"), User: "kept"}}, summarize(got))
	})
}

func TestFromSecretsLookup(t *testing.T) {
	h := testHasher(t)
	kr, errs := keyring.FromSecrets(h, []*corev1.Secret{
		dockerConfigJSONSecret("ns", "fixture", fixture(t, "config.json")),
	})
	require.Empty(t, errs)
	src := secretSource("ns", "fixture")
	tests := []struct {
		name  string
		image string
		want  []summary
	}{
		{name: "hub image via https://index.docker.io/v1/", image: "alpine:3.20",
			want: []summary{{Registry: "docker.io", Source: src, User: "hubuser"}}},
		{name: "hub image with explicit registry", image: "docker.io/myorg/app",
			want: []summary{{Registry: "docker.io", Source: src, User: "hubuser"}}},
		{name: "exact host before wildcard", image: "registry.example/app",
			want: []summary{{Registry: "registry.example", Source: src, User: "team-a"}, {Registry: "registry.example", Source: src, User: "wild"}}},
		{name: "wildcard only", image: "other.example/app",
			want: []summary{{Registry: "other.example", Source: src, User: "wild"}}},
		{name: "port and path", image: "registry.example:5000/team-b/app",
			want: []summary{{Registry: "registry.example:5000", Source: src}}},
		{name: "port without the path", image: "registry.example:5000/team-c/app", want: nil},
		{name: "no match", image: "quay.io/app", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kr.Lookup(context.Background(), tt.image)
			require.NoError(t, err)
			if tt.want == nil {
				assert.Empty(t, got)
				return
			}
			assert.Equal(t, tt.want, summarize(got))
			assertHashes(t, h, got)
		})
	}

	t.Run("identity token kept", func(t *testing.T) {
		got, err := kr.Lookup(context.Background(), "registry.example:5000/team-b/app")
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.True(t, got[0].Auth.IdentityToken == "idtok-team-b-Zr4", "identity token differs (value withheld)")
	})

	t.Run("invalid image", func(t *testing.T) {
		_, err := kr.Lookup(context.Background(), "registry.example/App")
		assert.ErrorIs(t, err, keyring.ErrInvalidImage)
	})
}

func TestFromSecretsEmpty(t *testing.T) {
	kr, errs := keyring.FromSecrets(testHasher(t), nil)
	require.Empty(t, errs)
	got, err := kr.Lookup(context.Background(), "alpine")
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestNilHasherPanics(t *testing.T) {
	assert.Panics(t, func() { keyring.FromSecrets(nil, nil) })
	assert.Panics(t, func() { _, _ = keyring.NewStatic(nil, credential.Source{}, nil) })
}
