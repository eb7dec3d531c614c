package criproxy

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// TestCredentialHashMatchesKeyring checks that a pull secret's credential,
// as the kubelet sends it (username and password) and as pullguard's image
// manager sends it, hashes as the keyring hashes that secret.
func TestCredentialHashMatchesKeyring(t *testing.T) {
	h, err := credential.NewHasher([]byte("0123456789abcdef0123456789abcdef"))
	require.NoError(t, err)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "pull", UID: "u1"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example:5000":{"username":"alice","password":"pw"}}}`)},
	}
	kr, errs := keyring.FromSecrets(h, []*corev1.Secret{secret})
	require.Empty(t, errs)
	cands, err := kr.Lookup(t.Context(), "registry.example:5000/team-a/app:v1")
	require.NoError(t, err)
	require.Len(t, cands, 1)
	want := cands[0].Hash

	b64 := base64.StdEncoding.EncodeToString([]byte("alice:pw"))
	tests := []struct {
		name string
		auth *runtimeapi.AuthConfig
		same bool
	}{
		{"as the kubelet sends it", &runtimeapi.AuthConfig{Username: "alice", Password: "pw"}, true},
		{"with ServerAddress", &runtimeapi.AuthConfig{Username: "alice", Password: "pw", ServerAddress: "registry.example:5000"}, true},
		{"with auth beside", &runtimeapi.AuthConfig{Username: "alice", Password: "pw", Auth: b64}, true},
		{"auth only", &runtimeapi.AuthConfig{Auth: b64}, true},
		{"auth only, unpadded", &runtimeapi.AuthConfig{Auth: base64.RawStdEncoding.EncodeToString([]byte("alice:pw"))}, true},
		{"another password", &runtimeapi.AuthConfig{Username: "alice", Password: "pw2"}, false},
		{"auth that disagrees", &runtimeapi.AuthConfig{Username: "alice", Password: "pw", Auth: base64.StdEncoding.EncodeToString([]byte("bob:x"))}, false},
		{"an identity token", &runtimeapi.AuthConfig{Username: "alice", Password: "pw", IdentityToken: "t"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := criCredential(h, "registry.example:5000", tc.auth)
			assert.Equal(t, tc.same, got.Hash == want)
			assert.False(t, got.Anonymous())
		})
	}
	other := criCredential(h, "other.example", &runtimeapi.AuthConfig{Username: "alice", Password: "pw"})
	assert.NotEqual(t, want, other.Hash, "the same credential for another registry is another credential")
	assert.True(t, criCredential(h, "r", nil).Anonymous())
	assert.True(t, criCredential(h, "r", &runtimeapi.AuthConfig{ServerAddress: "r"}).Anonymous())
}

func TestRecordSource(t *testing.T) {
	var hash credential.Hash
	hash[0] = 0xab
	src := recordSource("team-a", hash)
	assert.Equal(t, credential.SourceSecret, src.Kind)
	assert.False(t, src.NodeAccessible(), "a CRI credential is never node-wide")
	assert.Equal(t, "team-a", src.Namespace)
	assert.Equal(t, SourceNamePrefix+hash.String(), src.Name)
	for _, bad := range []string{"", "Not_A_Namespace", strings.Repeat("a", 64), "a/b"} {
		assert.Equal(t, NoNamespace, recordSource(bad, hash).Namespace, "%q", bad)
	}
}
