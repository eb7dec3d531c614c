package keyring_test

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// TestFromSecretsCandidateOrder: a pod's secrets make one keyring, as the
// kubelet's: the keys of all of them in reverse lexical order (byte order:
// '*' before letters, so a literal host comes before a glob over it, and a
// longer path before its prefix), the credentials of one key in secret
// order, then file order.
func TestFromSecretsCandidateOrder(t *testing.T) {
	h := testHasher(t)
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
		"a.r.example/teammate":       {"username":"longer","password":"pw-s3cret-Qz8"},
		"a.r.example/te":             {"username":"te","password":"pw-s3cret-Qz8"},
		"a.r.example:5000":           {"username":"other-port","password":"pw-s3cret-Qz8"}
	}`))
	kr, errs := keyring.FromSecrets(h, []*corev1.Secret{first, second})
	require.Empty(t, errs)

	users := func(image string) []string {
		t.Helper()
		got, err := kr.Lookup(context.Background(), image)
		require.NoError(t, err)
		assertHashes(t, h, got)
		out := make([]string, 0, len(got))
		for _, c := range got {
			out = append(out, c.Auth.Username)
		}
		return out
	}
	assert.Equal(t, []string{
		"path2",       // a.r.example/team/app
		"path1",       // a.r.example/team
		"te",          // a.r.example/te: a string prefix of the path
		"host-first",  // a.r.example: the first secret...
		"host-second", // ...then the second
		"wild-path",   // *.r.example/team
		"wild1",       // *.r.example
		"wild2",       // *.*.example
	}, users("a.r.example/team/app:v1"))
	assert.Equal(t, []string{"longer", "path1", "te", "host-first", "host-second", "wild-path", "wild1", "wild2"}, users("a.r.example/teammate/app"),
		"\"/team\" is a string prefix of \"/teammate/app\"")
	assert.Equal(t, []string{"wild2"}, users("A.R.example/team/app"), "hosts are compared as written: only the glob matches upper case")

	got, err := kr.Lookup(context.Background(), "a.r.example/team/app")
	require.NoError(t, err)
	assert.Equal(t, secretSource("team-a", "second"), got[0].Source)
	assert.Equal(t, secretSource("team-a", "first"), got[3].Source)
	assert.Equal(t, "a.r.example", got[0].Registry)
}

// TestFromSecretsKeepsRepeatedCredentials: a credential filed under
// several matching keys is returned for each, as the kubelet returns (and
// tries) it.
func TestFromSecretsKeepsRepeatedCredentials(t *testing.T) {
	h := testHasher(t)
	same := `{"username":"alice","password":"pw-s3cret-Qz8"}`
	a := dockerConfigJSONSecret("ns", "a", []byte(`{"auths":{"*.example":`+same+`,"r.example":`+same+`}}`))
	b := dockerConfigJSONSecret("ns", "b", []byte(`{"auths":{"r.example/team":`+same+`}}`))
	kr, errs := keyring.FromSecrets(h, []*corev1.Secret{a, b})
	require.Empty(t, errs)

	got, err := kr.Lookup(context.Background(), "r.example/team/app")
	require.NoError(t, err)
	assert.Equal(t, []summary{
		{Registry: "r.example", Source: secretSource("ns", "b"), User: "alice"},
		{Registry: "r.example", Source: secretSource("ns", "a"), User: "alice"},
		{Registry: "r.example", Source: secretSource("ns", "a"), User: "alice"},
	}, summarize(got))
	assertHashes(t, h, got)
}

// TestDockerHubFallback: when no key of a keyring matches a Docker Hub
// image (the kubelet's isDefaultRegistryMatch: registry docker.io, or one
// with neither '.' nor ':'), it gets the credentials of the key
// "index.docker.io" (however written: "https://index.docker.io/v1/" too),
// across all the keyring's secrets; when a key matched, only that key's.
func TestDockerHubFallback(t *testing.T) {
	h := testHasher(t)
	hub := dockerConfigJSONSecret("ns", "hub", []byte(`{"auths":{
		"https://index.docker.io/v1/": {"username":"hub-v1","password":"pw-hub-K2m"},
		"index.docker.io":             {"username":"hub-bare","password":"pw-hub-K2m"},
		"docker.io/team":              {"username":"team","password":"pw-hub-K2m"},
		"registry-1.docker.io":        {"username":"registry-1","password":"pw-hub-K2m"},
		"quay.io":                     {"username":"quay","password":"pw-hub-K2m"}
	}}`))
	other := dockerConfigJSONSecret("ns", "other", []byte(`{"auths":{"index.docker.io/v1/":{"username":"hub-other","password":"pw-hub-K2m"}}}`))
	kr, errs := keyring.FromSecrets(h, []*corev1.Secret{hub, other})
	require.Empty(t, errs)

	fallback := []string{"hub-v1", "hub-bare", "hub-other"} // one key, in the order added
	tests := []struct {
		image string
		want  []string
	}{
		{image: "alpine", want: fallback},
		{image: "docker.io/library/alpine:3.20", want: fallback},
		{image: "index.docker.io/someone/app", want: fallback},
		{image: "someone/app", want: fallback},
		{image: "team/app", want: []string{"team"}},     // a key matched: no fallback
		{image: "teammate/app", want: []string{"team"}}, // a string prefix matched
		{image: "localhost/app", want: fallback},        // no '.' nor ':': the kubelet takes it for Docker Hub
		{image: "LocalHost/app", want: fallback},        // likewise
		{image: "localhost:5000/app", want: nil},        // a port: not Docker Hub
		{image: "registry-1.docker.io/library/alpine", want: []string{"registry-1"}},
		{image: "quay.io/app", want: []string{"quay"}},
		{image: "other.example/app", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			got, err := kr.Lookup(context.Background(), tt.image)
			require.NoError(t, err)
			var users []string
			for _, c := range got {
				users = append(users, c.Auth.Username)
			}
			assert.Equal(t, tt.want, users)
			assertHashes(t, h, got)
		})
	}

	// An entry without credentials matches like any other, and so stops
	// the fallback (it is tried as an anonymous pull).
	empty := dockerConfigJSONSecret("ns", "empty", []byte(`{"auths":{"docker.io":{},"https://index.docker.io/v1/":{"username":"hub","password":"pw-hub-K2m"}}}`))
	kr, errs = keyring.FromSecrets(h, []*corev1.Secret{empty})
	require.Empty(t, errs)
	got, err := kr.Lookup(context.Background(), "alpine")
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.True(t, got[0].Anonymous())
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
		"r.example:http":{"username":"skipped","password":"pw-s3cret-Qz8"},
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
		assert.Equal(t, `data[.dockercfg]["r.example:http"]`, serr.Field)
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

	t.Run("an identity token is not kept, as the kubelet does not read it", func(t *testing.T) {
		got, err := kr.Lookup(context.Background(), "registry.example:5000/team-b/app")
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Empty(t, got[0].Auth.IdentityToken, "the identity token is presented (value withheld)")
		assert.True(t, got[0].Auth.Empty(), "an entry with no username or password is an empty credential, as the kubelet's")
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

// TestOneAccountOneHash: the spellings of one account in a pull secret
// give one credential, username and password only, and one hash; an
// "auth" that decodes to another account (a username with a colon cannot
// be spelled in it: it splits at the first colon) is that other account.
func TestOneAccountOneHash(t *testing.T) {
	h := testHasher(t)
	const image = "registry.example/team/app"
	want := credential.AuthConfig{Username: "alice", Password: "pw:s3cret\x00"}
	wantHash := h.Hash("registry.example", want)
	account := want.Username + ":" + want.Password
	tests := []struct {
		name   string
		secret *corev1.Secret
		want   credential.AuthConfig
	}{
		{name: "username and password", secret: dockerConfigJSONSecret("a", "s", []byte(`{"auths":{"registry.example":{"username":"alice","password":"pw:s3cret\u0000"}}}`)), want: want},
		{name: "auth", secret: dockerConfigJSONSecret("a", "s", []byte(`{"auths":{"registry.example":{"auth":"`+b64(account)+`"}}}`)), want: want},
		{name: "auth unpadded", secret: dockerConfigJSONSecret("a", "s", []byte(`{"auths":{"registry.example":{"auth":"`+base64.RawStdEncoding.EncodeToString([]byte(account))+`"}}}`)), want: want},
		{name: "auth with line breaks", secret: dockerConfigJSONSecret("a", "s", []byte(`{"auths":{"registry.example":{"auth":"`+b64(account)[:8]+`\r\n`+b64(account)[8:]+`\n"}}}`)), want: want},
		{name: "auth beside all three fields", secret: dockerConfigJSONSecret("a", "s", []byte(`{"auths":{"registry.example":{"Username":"alice","password":"pw:s3cret\u0000","AUTH":"`+b64(account)+`","email":"a@example.test"}}}`)), want: want},
		{name: "auth beside other fields", secret: dockerConfigJSONSecret("a", "s", []byte(`{"auths":{"registry.example":{"username":"bob","password":"x","auth":"`+b64(account)+`"}}}`)), want: want},
		{name: "legacy dockercfg", secret: dockercfgSecret("a", "s", []byte(`{"registry.example":{"auth":"`+b64(account)+`"}}`)), want: want},
		{name: "auth of the username alice:x, split at the first colon", secret: dockerConfigJSONSecret("a", "s", []byte(`{"auths":{"registry.example":{"auth":"`+b64("alice:x:y")+`"}}}`)),
			want: credential.AuthConfig{Username: "alice", Password: "x:y"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kr, errs := keyring.FromSecrets(h, []*corev1.Secret{tc.secret})
			require.Empty(t, errs)
			got, err := kr.Lookup(context.Background(), image)
			require.NoError(t, err)
			require.Len(t, got, 1)
			assertSameAuth(t, tc.want, got[0].Auth, tc.name)
			assert.Equal(t, tc.want == want, got[0].Hash == wantHash, "one account, one hash")
			assertHashes(t, h, got)
		})
	}
}
