package keyring_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pullguard/pullguard/pkg/credential"
)

// testSecrets are every secret value the fixtures and tests use; no error
// message may contain any of them.
var testSecrets = []string{
	"pw-hub-K2m", "pw-team-a-Xq7", "pw-wild-J9p", "idtok-team-b-Zr4",
	"pw-legacy-Tt1", "pw-old-Vb3", "pw-s3cret-Qz8", "regtok-Lm5", "pw-node-Hh6",
	"aHVidXNlcjpwdy1odWItSzJt", "d2lsZDpwdy13aWxkLUo5cA==", "bGVnYWN5OnB3LWxlZ2FjeS1UdDE=",
}

// assertNoSecrets checks that s holds no test secret, without printing s
// when it does (it might hold one).
func assertNoSecrets(t *testing.T, s string) {
	t.Helper()
	for _, secret := range testSecrets {
		if bytes.Contains([]byte(s), []byte(secret)) {
			t.Errorf("message leaks test secret #%d (message withheld)", indexOf(secret))
		}
	}
}

func indexOf(secret string) int {
	for i, s := range testSecrets {
		if s == secret {
			return i
		}
	}
	return -1
}

// assertSameAuth compares two AuthConfigs field by field and names only
// the fields that differ, never their values.
func assertSameAuth(t *testing.T, want, got credential.AuthConfig, what string) {
	t.Helper()
	for _, f := range []struct {
		name      string
		want, got string
	}{
		{"Username", want.Username, got.Username},
		{"Password", want.Password, got.Password},
		{"Auth", want.Auth, got.Auth},
		{"IdentityToken", want.IdentityToken, got.IdentityToken},
		{"RegistryToken", want.RegistryToken, got.RegistryToken},
	} {
		assert.True(t, f.want == f.got, "%s: field %s differs (values withheld)", what, f.name)
	}
}

func testHasher(t testing.TB) *credential.Hasher {
	t.Helper()
	h, err := credential.NewHasher(bytes.Repeat([]byte{7}, credential.KeySize))
	require.NoError(t, err)
	return h
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return data
}

func dockerConfigJSONSecret(ns, name string, data []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: data},
	}
}

func dockercfgSecret(ns, name string, data []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Type:       corev1.SecretTypeDockercfg,
		Data:       map[string][]byte{corev1.DockerConfigKey: data},
	}
}

func secretSource(ns, name string) credential.Source {
	return credential.Source{Kind: credential.SourceSecret, Namespace: ns, Name: name, UID: "uid-" + name}
}

// summary is a candidate without its credential material, for comparing
// candidate lists in assertions that may print.
type summary struct {
	Registry string
	Source   credential.Source
	User     string
}

func summarize(cs []credential.Credential) []summary {
	out := make([]summary, 0, len(cs))
	for _, c := range cs {
		out = append(out, summary{Registry: c.Registry, Source: c.Source, User: c.Auth.Username})
	}
	return out
}

// assertHashes checks that every candidate carries the keyed hash of its
// credential for its registry.
func assertHashes(t *testing.T, h *credential.Hasher, cs []credential.Credential) {
	t.Helper()
	for i, c := range cs {
		assert.True(t, c.Hash == h.Hash(c.Registry, c.Auth), "candidate %d has the wrong hash", i)
	}
}
