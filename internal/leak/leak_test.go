package leak_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/leak"
)

// TestEveryEncodingIsFound embeds a secret in each encoding, at every
// alignment and inside longer encoded texts, and checks Scan finds it and
// Redact removes it.
func TestEveryEncodingIsFound(t *testing.T) {
	const secret = `pw-"q/ü+&%=x` // characters every escaping changes
	user := "alice"
	dockerConfig := fmt.Sprintf(`{"auths":{"r.example":{"username":%q,"password":%q}}}`, user, secret)
	texts := map[string]string{
		"plain":                     "error: " + secret + " refused",
		"json-escaped":              mustJSON(t, "password="+secret),
		"url-query":                 "GET /token?password=" + url.QueryEscape(secret),
		"url-path":                  "GET /v2/" + url.PathEscape(secret) + "/manifests/v1",
		"base64 of the password":    base64.StdEncoding.EncodeToString([]byte(secret)),
		"base64 of user:password":   "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+secret)),
		"base64url user:password":   base64.RawURLEncoding.EncodeToString([]byte(user + ":" + secret)),
		"base64 of a docker config": base64.StdEncoding.EncodeToString([]byte(dockerConfig)),
		"json of a docker config":   mustJSON(t, dockerConfig),
	}
	for prefix := 0; prefix < 3; prefix++ {
		texts[fmt.Sprintf("base64 at alignment %d", prefix)] = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", prefix) + secret + "tail"))
	}
	for name, text := range texts {
		t.Run(name, func(t *testing.T) {
			found := leak.Scan(map[string]string{name: text}, secret)
			require.Len(t, found, 1, "not found in %q", text)
			redacted := leak.Redact(text, secret)
			assert.Empty(t, leak.Scan(map[string]string{name: redacted}, secret), "redacted: %q", redacted)
			assert.Contains(t, redacted, leak.Placeholder)
		})
	}
}

func TestShortAndCleanTexts(t *testing.T) {
	assert.Empty(t, leak.Forms("abc"), "too short to look for")
	assert.Equal(t, "abc stays", leak.Redact("abc stays", "abc"))
	assert.Empty(t, leak.Scan(map[string]string{"clean": "nothing to see: 401 Unauthorized"}, "pw-secret-1234"))
	forms := leak.Forms("pw-secret-1234")
	for i := 1; i < len(forms); i++ {
		assert.GreaterOrEqual(t, len(forms[i-1]), len(forms[i]), "longest first")
	}
}

func mustJSON(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return string(b)
}

func FuzzRedact(f *testing.F) {
	f.Add("pw-secret-1234", "x pw-secret-1234 y")
	f.Fuzz(func(t *testing.T, secret, text string) {
		out := leak.Redact(text+secret+text, secret)
		if len(secret) >= leak.MinLen && strings.Contains(out, secret) && !strings.Contains(leak.Placeholder, secret) {
			t.Fatalf("secret %q left in %q", secret, out)
		}
	})
}

// TestBasicAuthOddlyPadded: an "auth" field with an extra or a missing
// "=" (which a runtime may still read, and then send as a canonical
// Authorization header) gives up its password and the header a registry
// would echo.
func TestBasicAuthOddlyPadded(t *testing.T) {
	header := base64.StdEncoding.EncodeToString([]byte("alice:s3cret-pw"))
	for _, field := range []string{header, header + "=", strings.TrimRight(header, "=")} {
		secrets := leak.BasicAuth(field)
		assert.Contains(t, secrets, "s3cret-pw", field)
		text := "registry said: Basic " + header
		assert.NotContains(t, leak.Redact(text, secrets...), header, field)
	}
}

// TestBasicAuthNULPadded: a password with NUL at its ends gives up the
// password containerd presents for it, trimmed (its ParseAuth).
func TestBasicAuthNULPadded(t *testing.T) {
	secrets := leak.BasicAuth(base64.StdEncoding.EncodeToString([]byte("alice:\x00s3cret-pw\x00")))
	assert.Contains(t, secrets, "\x00s3cret-pw\x00")
	assert.Contains(t, secrets, "s3cret-pw")
	assert.NotContains(t, leak.Redact("registry said: wrong password s3cret-pw", secrets...), "s3cret-pw")
}
