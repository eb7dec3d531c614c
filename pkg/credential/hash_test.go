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

// TestHashAuth: the registry-free hash covers every field, depends on the
// key, and never equals a registry-bound hash of the same credential.
func TestHashAuth(t *testing.T) {
	h := testHasher(t, 1)
	ref := h.HashAuth(base)
	tests := []struct {
		name   string
		hasher *credential.Hasher
		mutate func(*credential.AuthConfig)
		equal  bool
	}{
		{name: "same credential, same key", hasher: testHasher(t, 1), mutate: func(*credential.AuthConfig) {}, equal: true},
		{name: "other key", hasher: testHasher(t, 2), mutate: func(*credential.AuthConfig) {}},
		{name: "username", hasher: h, mutate: func(a *credential.AuthConfig) { a.Username += "x" }},
		{name: "password", hasher: h, mutate: func(a *credential.AuthConfig) { a.Password += "x" }},
		{name: "auth", hasher: h, mutate: func(a *credential.AuthConfig) { a.Auth += "x" }},
		{name: "identity token", hasher: h, mutate: func(a *credential.AuthConfig) { a.IdentityToken += "x" }},
		{name: "registry token", hasher: h, mutate: func(a *credential.AuthConfig) { a.RegistryToken += "x" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := base
			tt.mutate(&a)
			assert.Equal(t, tt.equal, tt.hasher.HashAuth(a) == ref)
		})
	}
	for _, registry := range []string{"", "docker.io", "registry.example"} {
		assert.NotEqual(t, ref, h.Hash(registry, base), "bound to %q", registry)
	}
}

// TestLoadOrCreateSharedHasher: the first call creates a 0600 key, later
// calls (and concurrent ones) read that same key, and a key of the wrong
// size is an error that leaves the file as it is.
func TestLoadOrCreateSharedHasher(t *testing.T) {
	t.Run("created once, then shared", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "key")
		const n = 8
		hashes := make(chan credential.Hash, n)
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			go func() {
				h, err := credential.LoadOrCreateSharedHasher(path)
				if err != nil {
					errs <- err
					return
				}
				hashes <- h.HashAuth(base)
			}()
		}
		var got []credential.Hash
		for i := 0; i < n; i++ {
			select {
			case err := <-errs:
				require.NoError(t, err)
			case h := <-hashes:
				got = append(got, h)
			}
		}
		for _, h := range got[1:] {
			assert.Equal(t, got[0], h, "every process holds the key that won")
		}
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		entries, err := os.ReadDir(filepath.Dir(path))
		require.NoError(t, err)
		assert.Len(t, entries, 1, "no temporary file is left")
	})
	t.Run("wrong size is an error, left alone", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "key")
		require.NoError(t, os.WriteFile(path, []byte("short"), 0o600))
		_, err := credential.LoadOrCreateSharedHasher(path)
		require.ErrorIs(t, err, credential.ErrInvalidKey)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, "short", string(data))
	})
}

// TestNewRandomHasher: each hasher has a key of its own: one credential
// hashes alike under one hasher and differently under two.
func TestNewRandomHasher(t *testing.T) {
	a, err := credential.NewRandomHasher()
	require.NoError(t, err)
	b, err := credential.NewRandomHasher()
	require.NoError(t, err)
	auth := credential.AuthConfig{Username: "alice", Password: "pw-alice-7Qe"}
	assert.Equal(t, a.Hash("registry.example", auth), a.Hash("registry.example", auth))
	assert.NotEqual(t, a.Hash("registry.example", auth), b.Hash("registry.example", auth))
}
