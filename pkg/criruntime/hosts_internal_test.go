package criruntime

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/dockerauth"
)

// TestHostCredentials: what the manifest check presents to a host for a
// CRI AuthConfig is what containerd's ParseAuth gives: its order of
// fields, its ServerAddress rule, and its reading of "auth" (padding
// required, NUL trimmed from the password's ends).
func TestHostCredentials(t *testing.T) {
	const host = "registry.example:5000"
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name       string
		auth       *runtimeapi.AuthConfig
		user, pass string
		err        error
	}{
		{name: "none", auth: nil},
		{name: "username and password", auth: &runtimeapi.AuthConfig{Username: "alice", Password: "pw", Auth: b64("bob:x")}, user: "alice", pass: "pw"},
		{name: "a password alone is not presented before auth", auth: &runtimeapi.AuthConfig{Password: "pw", Auth: b64("bob:x")}, user: "bob", pass: "x"},
		{name: "identity token before auth", auth: &runtimeapi.AuthConfig{IdentityToken: "tok", Auth: b64("bob:x")}, pass: "tok"},
		{name: "auth", auth: &runtimeapi.AuthConfig{Auth: b64("bob:x:y")}, user: "bob", pass: "x:y"},
		{name: "auth with NUL around the password", auth: &runtimeapi.AuthConfig{Auth: b64("bob:\x00x\x00")}, user: "bob", pass: "x"},
		{name: "unpadded auth", auth: &runtimeapi.AuthConfig{Auth: base64.RawStdEncoding.EncodeToString([]byte("bob:x"))}, err: dockerauth.ErrNotBase64},
		{name: "auth without a colon", auth: &runtimeapi.AuthConfig{Auth: b64("bob")}, err: dockerauth.ErrNoColon},
		{name: "a registry token is not presented", auth: &runtimeapi.AuthConfig{RegistryToken: "tok"}},
		{name: "server address of this host", auth: &runtimeapi.AuthConfig{ServerAddress: "https://" + host, Username: "alice", Password: "pw"}, user: "alice", pass: "pw"},
		{name: "server address of another host", auth: &runtimeapi.AuthConfig{ServerAddress: "https://other.example", Username: "alice", Password: "pw"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			user, pass, err := hostCredentials(tc.auth, host)
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.user, user)
			assert.True(t, tc.pass == pass, "the secret presented differs (value withheld)")
		})
	}
}
