package credential_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
)

func testHasher(t testing.TB, seed byte) *credential.Hasher {
	t.Helper()
	h, err := credential.NewHasher(bytes.Repeat([]byte{seed}, credential.KeySize))
	require.NoError(t, err)
	return h
}

var base = credential.AuthConfig{
	Username:      "alice",
	Password:      "s3cret-pass",
	Auth:          "YWxpY2U6czNjcmV0LXBhc3M=",
	IdentityToken: "id-token",
	RegistryToken: "reg-token",
}

func TestHashEqualCredentialsHashEqual(t *testing.T) {
	h1, h2 := testHasher(t, 1), testHasher(t, 1)
	a, b := base, base
	assert.Equal(t, h1.Hash("registry.example", a), h2.Hash("registry.example", b))
	assert.True(t, h1.Hash("registry.example", a).Equal(h2.Hash("registry.example", b)))
}

func TestHashAnyChangeDiffers(t *testing.T) {
	h := testHasher(t, 1)
	ref := h.Hash("registry.example", base)
	tests := []struct {
		name     string
		registry string
		mutate   func(*credential.AuthConfig)
	}{
		{name: "username", registry: "registry.example", mutate: func(a *credential.AuthConfig) { a.Username += "x" }},
		{name: "password", registry: "registry.example", mutate: func(a *credential.AuthConfig) { a.Password += "x" }},
		{name: "auth", registry: "registry.example", mutate: func(a *credential.AuthConfig) { a.Auth += "x" }},
		{name: "identity token", registry: "registry.example", mutate: func(a *credential.AuthConfig) { a.IdentityToken += "x" }},
		{name: "registry token", registry: "registry.example", mutate: func(a *credential.AuthConfig) { a.RegistryToken += "x" }},
		{name: "registry host", registry: "other.example", mutate: func(*credential.AuthConfig) {}},
		{name: "registry port", registry: "registry.example:5000", mutate: func(*credential.AuthConfig) {}},
		{
			name: "field boundary shift", registry: "registry.example",
			mutate: func(a *credential.AuthConfig) { a.Username, a.Password = "alices3cret-pass", "" },
		},
		{
			name: "moved between fields", registry: "registry.example",
			mutate: func(a *credential.AuthConfig) { a.IdentityToken, a.RegistryToken = a.RegistryToken, a.IdentityToken },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := base
			tt.mutate(&a)
			assert.NotEqual(t, ref, h.Hash(tt.registry, a))
		})
	}
}

func TestHashKeyChangeDiffers(t *testing.T) {
	assert.NotEqual(t, testHasher(t, 1).Hash("registry.example", base), testHasher(t, 2).Hash("registry.example", base))
}

func TestHashRegistryNormalized(t *testing.T) {
	h := testHasher(t, 1)
	tests := []struct{ a, b string }{
		{a: "Registry.Example", b: "registry.example"},
		{a: "index.docker.io", b: "docker.io"},
		{a: "registry-1.docker.io", b: "docker.io"},
		{a: "", b: "docker.io"},
	}
	for _, tt := range tests {
		t.Run(tt.a, func(t *testing.T) {
			assert.Equal(t, h.Hash(tt.b, base), h.Hash(tt.a, base))
		})
	}
}

func TestHashStringIsShortPrefix(t *testing.T) {
	hash := testHasher(t, 1).Hash("registry.example", base)
	assert.Len(t, hash.String(), 12)
	assert.False(t, hash.IsZero())
	assert.True(t, credential.Hash{}.IsZero())
}

func TestNewHasherRejectsWrongKeySize(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33, 64} {
		_, err := credential.NewHasher(make([]byte, n))
		assert.ErrorIs(t, err, credential.ErrInvalidKey, "key of %d bytes", n)
	}
}

func TestAuthConfigNeverFormatsValues(t *testing.T) {
	for _, verb := range []string{"%v", "%+v", "%s", "%#v", "%q", "%x"} {
		out := fmt.Sprintf(verb, base) + fmt.Sprintf(verb, &base) + fmt.Sprintf(verb, credential.Credential{Auth: base})
		for _, secret := range []string{base.Username, base.Password, base.Auth, base.IdentityToken, base.RegistryToken} {
			assert.NotContains(t, out, secret, "verb %s", verb)
		}
	}
	assert.Equal(t, "AuthConfig{anonymous}", credential.AuthConfig{}.String())
	assert.Equal(t, "AuthConfig{redacted: username,password}", credential.AuthConfig{Username: "u", Password: "p"}.String())
}

func TestLoadOrCreateHasher(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "hashkey")

	h1, created, err := credential.LoadOrCreateHasher(path)
	require.NoError(t, err)
	assert.True(t, created)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	h2, created, err := credential.LoadOrCreateHasher(path)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, h1.Hash("r.example", base), h2.Hash("r.example", base), "a reloaded key hashes the same")

	t.Run("loose permissions are tightened", func(t *testing.T) {
		require.NoError(t, os.Chmod(path, 0o644))
		_, _, err := credential.LoadOrCreateHasher(path)
		require.NoError(t, err)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	})

	t.Run("a truncated key is set aside and replaced", func(t *testing.T) {
		require.NoError(t, os.WriteFile(path, []byte("short"), 0o600))
		h3, created, err := credential.LoadOrCreateHasher(path)
		require.NoError(t, err)
		assert.True(t, created)
		assert.NotEqual(t, h1.Hash("r.example", base), h3.Hash("r.example", base))
		kept, err := os.ReadFile(path + ".invalid")
		require.NoError(t, err)
		assert.Equal(t, "short", string(kept))
	})

	t.Run("a lost key is recreated, different", func(t *testing.T) {
		require.NoError(t, os.Remove(path))
		h4, created, err := credential.LoadOrCreateHasher(path)
		require.NoError(t, err)
		assert.True(t, created)
		assert.NotEqual(t, h1.Hash("r.example", base), h4.Hash("r.example", base))
	})
}

func TestSource(t *testing.T) {
	tests := []struct {
		src            credential.Source
		want           string
		nodeAccessible bool
	}{
		{src: credential.Source{}, want: "none", nodeAccessible: true},
		{src: credential.Source{Kind: credential.SourceNode}, want: "node", nodeAccessible: true},
		{src: credential.Source{Kind: credential.SourceNode, Name: "ecr"}, want: "node (ecr)", nodeAccessible: true},
		{src: credential.Source{Kind: credential.SourceSecret, Namespace: "a", Name: "s", UID: "u1"}, want: "secret a/s (uid u1)"},
		{src: credential.Source{Kind: credential.SourceServiceAccount, Namespace: "a", Name: "sa", UID: "u2"}, want: "serviceaccount a/sa (uid u2)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.src.String())
			assert.Equal(t, tt.nodeAccessible, tt.src.NodeAccessible())
		})
	}
}

func BenchmarkHash(b *testing.B) {
	h := testHasher(b, 1)
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Hash("registry.example", base)
	}
}
