package keyring_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

var pluginSource = credential.Source{Kind: credential.SourceNode, Name: "ecr-credential-provider"}

func TestNewStatic(t *testing.T) {
	h := testHasher(t)
	kr, err := keyring.NewStatic(h, pluginSource, map[string]credential.AuthConfig{
		"b.example":                   {Username: "b", Password: "pw-s3cret-Qz8"},
		"*.example":                   {Username: "wild", Password: "pw-s3cret-Qz8"},
		"https://a.example/v1/":       {Username: "a", Password: "pw-s3cret-Qz8"},
		"a.example/team":              {Username: "a-team", Password: "pw-s3cret-Qz8"},
		"a.example/*":                 {Username: "never", Password: "pw-s3cret-Qz8"},
		"a.example:http":              {Username: "bad", Password: "pw-s3cret-Qz8"},
		"a example":                   {Username: "bad", Password: "pw-s3cret-Qz8"},
		"empty.example":               {},
		"*.dkr.ecr.*.amazonaws.com":   {Username: "AWS", Password: "pw-s3cret-Qz8"},
		"1.dkr.ecr.*.amazonaws.com":   {Username: "AWS-1", Password: "pw-s3cret-Qz8"},
		"1.dkr.ecr.eu.amazonaws.com/": {Username: "AWS-exact", Password: "pw-s3cret-Qz8"},
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, keyring.ErrInvalidPattern)
	assert.Contains(t, err.Error(), `"a.example:http"`)
	assert.Contains(t, err.Error(), `"a example"`)
	assertNoSecrets(t, err.Error())

	tests := []struct {
		name  string
		image string
		users []string
	}{
		{name: "reverse lexical key order", image: "a.example/team/app", users: []string{"a-team", "a", "wild"}},
		{name: "v1 path dropped from the key", image: "a.example/other", users: []string{"a", "wild"}},
		{name: "empty credentials kept", image: "empty.example/app", users: []string{"", "wild"}},
		{name: "a path holding '*' matches only a literal '*', never", image: "a.example/app", users: []string{"a", "wild"}},
		{name: "trailing slash key, then '1' before '*'", image: "1.dkr.ecr.eu.amazonaws.com/app", users: []string{"AWS-exact", "AWS-1", "AWS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kr.Lookup(context.Background(), tt.image)
			require.NoError(t, err)
			users := make([]string, 0, len(got))
			for _, c := range got {
				users = append(users, c.Auth.Username)
				assert.Equal(t, pluginSource, c.Source)
			}
			assert.Equal(t, tt.users, users)
			assertHashes(t, h, got)
		})
	}
}

// TestNewStaticKeyOrder: keys are taken in reverse lexical (byte) order,
// not by how specific they are.
func TestNewStaticKeyOrder(t *testing.T) {
	h := testHasher(t)
	kr, err := keyring.NewStatic(h, pluginSource, map[string]credential.AuthConfig{
		"*.b.example": {Username: "b"},
		"*.a.example": {Username: "never"},
		"x.*.example": {Username: "x"},
		"c.*.example": {Username: "never"},
		"*.*.example": {Username: "any"},
	})
	require.NoError(t, err)
	got, err := kr.Lookup(context.Background(), "x.b.example/app")
	require.NoError(t, err)
	assert.Equal(t, []summary{
		{Registry: "x.b.example", Source: pluginSource, User: "x"},
		{Registry: "x.b.example", Source: pluginSource, User: "b"},
		{Registry: "x.b.example", Source: pluginSource, User: "any"},
	}, summarize(got))
}

// TestLookupAll: several answers looked up as one keyring, as the kubelet
// looks up its plugins' answers: keys ordered across them, one key's
// credentials in argument order, the Docker Hub fallback only when no key
// of any of them matched.
func TestLookupAll(t *testing.T) {
	h := testHasher(t)
	src := func(name string) credential.Source { return credential.Source{Kind: credential.SourceNode, Name: name} }
	first, err := keyring.NewStatic(h, src("first"), map[string]credential.AuthConfig{
		"*.example":        {Username: "first-wild"},
		"reg.example/team": {Username: "first-team"},
		"index.docker.io":  {Username: "first-hub"},
	})
	require.NoError(t, err)
	second, err := keyring.NewStatic(h, src("second"), map[string]credential.AuthConfig{
		"reg.example":                 {Username: "second-host"},
		"https://reg.example/v2/team": {Username: "second-team"},
		"https://index.docker.io/v1/": {Username: "second-hub"},
		"docker.io/team":              {Username: "second-docker-team"},
	})
	require.NoError(t, err)
	tests := []struct {
		image string
		want  []summary
	}{
		{image: "reg.example/team/app", want: []summary{
			{Registry: "reg.example", Source: src("first"), User: "first-team"},
			{Registry: "reg.example", Source: src("second"), User: "second-team"},
			{Registry: "reg.example", Source: src("second"), User: "second-host"},
			{Registry: "reg.example", Source: src("first"), User: "first-wild"},
		}},
		{image: "alpine", want: []summary{
			{Registry: "docker.io", Source: src("first"), User: "first-hub"},
			{Registry: "docker.io", Source: src("second"), User: "second-hub"},
		}},
		{image: "team/app", want: []summary{
			{Registry: "docker.io", Source: src("second"), User: "second-docker-team"},
		}},
		{image: "other.example.org/app"},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			im, err := keyring.ParseImage(tt.image)
			require.NoError(t, err)
			got := keyring.LookupAll(im, nil, first, second)
			if tt.want == nil {
				assert.Empty(t, got)
				return
			}
			assert.Equal(t, tt.want, summarize(got))
			assertHashes(t, h, got)
		})
	}
}

// TestWildcardHashCache checks the per-entry hash cache under concurrent
// look-ups for more registries than the cache holds (run with -race).
func TestWildcardHashCache(t *testing.T) {
	h := testHasher(t)
	auth := credential.AuthConfig{Username: "u", Password: "pw-s3cret-Qz8"}
	kr, err := keyring.NewStatic(h, pluginSource, map[string]credential.AuthConfig{"*.example": auth})
	require.NoError(t, err)

	const registries = 40
	var wg sync.WaitGroup
	results := make([][]credential.Credential, registries*4)
	errs := make([]error, len(results))
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = kr.Lookup(context.Background(), fmt.Sprintf("r%d.example/app", i%registries))
		}()
	}
	wg.Wait()
	for i, got := range results {
		require.NoError(t, errs[i])
		require.Len(t, got, 1)
		assert.Equal(t, fmt.Sprintf("r%d.example", i%registries), got[0].Registry)
		assert.True(t, got[0].Hash == h.Hash(got[0].Registry, auth), "look-up %d: wrong hash", i)
	}
}
