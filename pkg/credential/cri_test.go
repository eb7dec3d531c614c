package credential_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/dockerauth"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// TestCredentialHashMatchesKeyring checks that a pull secret's credential,
// however the secret spells it, as the kubelet sends it (username and
// password) and as pullguard's image manager sends it (what its keyring
// gives: the same), hashes as the keyring hashes that secret.
func TestCredentialHashMatchesKeyring(t *testing.T) {
	h, err := credential.NewHasher([]byte("0123456789abcdef0123456789abcdef"))
	require.NoError(t, err)
	b64 := base64.StdEncoding.EncodeToString([]byte("alice:pw"))
	for _, spelling := range []struct{ name, entry string }{
		{"secret of username and password", `{"username":"alice","password":"pw"}`},
		{"secret of auth", `{"auth":"` + b64 + `"}`},
		{"secret of unpadded auth", `{"auth":"` + base64.RawStdEncoding.EncodeToString([]byte("alice:pw")) + `\n","email":"a@example.test"}`},
	} {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "pull", UID: "u1"},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example:5000":` + spelling.entry + `}}`)},
		}
		kr, errs := keyring.FromSecrets(h, []*corev1.Secret{secret})
		require.Empty(t, errs)
		cands, err := kr.Lookup(t.Context(), "registry.example:5000/team-a/app:v1")
		require.NoError(t, err)
		require.Len(t, cands, 1)
		want := cands[0].Hash
		imageManager := &runtimeapi.AuthConfig{Username: cands[0].Auth.Username, Password: cands[0].Auth.Password, Auth: cands[0].Auth.Auth}

		tests := []struct {
			name string
			auth *runtimeapi.AuthConfig
			same bool
		}{
			{"as the kubelet sends it", &runtimeapi.AuthConfig{Username: "alice", Password: "pw"}, true},
			{"as the image manager sends it", imageManager, true},
			{"with ServerAddress", &runtimeapi.AuthConfig{Username: "alice", Password: "pw", ServerAddress: "registry.example:5000"}, true},
			{"with auth beside", &runtimeapi.AuthConfig{Username: "alice", Password: "pw", Auth: b64}, true},
			{"auth only", &runtimeapi.AuthConfig{Auth: b64}, true},
			{"auth only, unpadded", &runtimeapi.AuthConfig{Auth: base64.RawStdEncoding.EncodeToString([]byte("alice:pw"))}, true},
			{"another password", &runtimeapi.AuthConfig{Username: "alice", Password: "pw2"}, false},
			{"auth that disagrees", &runtimeapi.AuthConfig{Username: "alice", Password: "pw", Auth: base64.StdEncoding.EncodeToString([]byte("bob:x"))}, false},
			{"an identity token", &runtimeapi.AuthConfig{Username: "alice", Password: "pw", IdentityToken: "t"}, false},
		}
		for _, tc := range tests {
			t.Run(spelling.name+"/"+tc.name, func(t *testing.T) {
				got := credential.CRICredential(h, "registry.example:5000", tc.auth)
				assert.Equal(t, tc.same, got.Hash == want)
				assert.False(t, got.Anonymous())
			})
		}
		other := credential.CRICredential(h, "other.example", &runtimeapi.AuthConfig{Username: "alice", Password: "pw"})
		assert.NotEqual(t, want, other.Hash, "the same credential for another registry is another credential")
	}
	assert.True(t, credential.CRICredential(h, "r", nil).Anonymous())
	assert.True(t, credential.CRICredential(h, "r", (*runtimeapi.AuthConfig)(nil)).Anonymous())
	assert.True(t, credential.CRICredential(h, "r", &runtimeapi.AuthConfig{ServerAddress: "r"}).Anonymous())
}

// FuzzCanonicalAuth feeds arbitrary CRI credentials and states the rule
// canonicalAuth follows: "auth" says username:password, split at its
// first colon, as the kubelet decodes it.
//   - Never a panic, and an anonymous result only for an AuthConfig whose
//     fields are all empty, or hold only an "auth" of an empty username
//     and password.
//   - An "auth" that decodes, alone or beside the username and password
//     it decodes to, hashes as those two fields (padded or not, line
//     breaks, any spelling the kubelet reads).
//   - An account spelled as fields, as "auth" beside them and as "auth"
//     alone hashes alike when its username has no colon. One with a colon
//     cannot be spelled in "auth": alone, "auth" is the account its first
//     colon gives; beside the fields, it names another account than they
//     do and is kept, so that spelling hashes as neither (one more
//     registry check, never a match for an account it does not name).
func FuzzCanonicalAuth(f *testing.F) {
	f.Add("alice", "pw", "", "", "")
	f.Add("", "", base64.StdEncoding.EncodeToString([]byte("bob:x:y")), "", "")
	f.Add("u", "p", "%%%", "tok", "")
	f.Add(":", "0", "Ojow\n", "", "")
	f.Add("", "", "Og", "", "")
	h, err := credential.NewHasher(make([]byte, credential.KeySize))
	require.NoError(f, err)
	const registry = "registry.example"
	hash := func(a *runtimeapi.AuthConfig) credential.Hash { return credential.CRICredential(h, registry, a).Hash }
	f.Fuzz(func(t *testing.T, user, pass, auth, idToken, regToken string) {
		c := credential.CRICredential(h, registry, &runtimeapi.AuthConfig{Username: user, Password: pass, Auth: auth, IdentityToken: idToken, RegistryToken: regToken})
		du, dp, derr := dockerauth.Decode(auth, dockerauth.Kubelet)
		if c.Anonymous() {
			assert.Empty(t, user+pass+idToken+regToken, "an anonymous result for a credential")
			assert.True(t, auth == "" || (derr == nil && du == "" && dp == ""), "an anonymous result for an auth that says something")
		}
		tokens := func(a *runtimeapi.AuthConfig) *runtimeapi.AuthConfig {
			a.IdentityToken, a.RegistryToken = idToken, regToken
			return a
		}
		if derr == nil {
			fields := hash(tokens(&runtimeapi.AuthConfig{Username: du, Password: dp}))
			assert.Equal(t, fields, hash(tokens(&runtimeapi.AuthConfig{Auth: auth})), "auth alone")
			assert.Equal(t, fields, hash(tokens(&runtimeapi.AuthConfig{Username: du, Password: dp, Auth: auth})), "auth beside its fields")
		}

		plain := hash(tokens(&runtimeapi.AuthConfig{Username: user, Password: pass}))
		splitUser, splitPass, _ := strings.Cut(user+":"+pass, ":")
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
			spelled := enc.EncodeToString([]byte(user + ":" + pass))
			alone := hash(tokens(&runtimeapi.AuthConfig{Auth: spelled}))
			beside := hash(tokens(&runtimeapi.AuthConfig{Username: user, Password: pass, Auth: spelled}))
			assert.Equal(t, hash(tokens(&runtimeapi.AuthConfig{Username: splitUser, Password: splitPass})), alone, "auth alone is the account its first colon gives")
			if !strings.Contains(user, ":") {
				assert.Equal(t, plain, alone, "auth alone")
				assert.Equal(t, plain, beside, "auth beside the fields")
				continue
			}
			assert.NotEqual(t, plain, beside, "auth cannot spell a username with a colon: beside it, it is kept")
			assert.NotEqual(t, alone, beside)
		}
	})
}
