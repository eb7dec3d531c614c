package keyring_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// fixedKeyring is a plugin stand-in: it answers every look-up with the same
// candidates and error, and counts its calls.
type fixedKeyring struct {
	creds []credential.Credential
	err   error
	calls atomic.Int32
}

func (f *fixedKeyring) Lookup(context.Context, string) ([]credential.Credential, error) {
	f.calls.Add(1)
	return f.creds, f.err
}

// TestMergeOrderAndErrors: a union of keyrings returns each one's
// candidates in argument order, each in its own order, and, as the
// kubelet's UnionDockerKeyring, leaves nothing out: a credential two
// keyrings hold comes twice.
func TestMergeOrderAndErrors(t *testing.T) {
	h := testHasher(t)
	shared := credential.AuthConfig{Username: "shared", Password: "pw-s3cret-Qz8"}
	secrets, errs := keyring.FromSecrets(h, []*corev1.Secret{
		dockerConfigJSONSecret("ns", "pull", []byte(`{"auths":{
			"*.example":{"username":"secret-wild","password":"pw-s3cret-Qz8"},
			"r.example/team":{"username":"shared","password":"pw-s3cret-Qz8"}}}`)),
	})
	require.Empty(t, errs)
	nodePath := writeFile(t, filepath.Join(t.TempDir(), "config.json"), []byte(`{"auths":{
		"r.example":{"username":"shared","password":"pw-s3cret-Qz8"},
		"r.example/team/app":{"username":"node-exact","password":"pw-node-Hh6"}}}`))
	node, err := keyring.NodeKeyring(h, []string{nodePath})
	require.NoError(t, err)
	pluginErr := errors.New("plugin ecr-credential-provider failed: exit status 1")
	plugin := &fixedKeyring{
		creds: []credential.Credential{
			{Registry: "r.example", Auth: credential.AuthConfig{Username: "plugin"}, Source: pluginSource, Hash: h.Hash("r.example", credential.AuthConfig{Username: "plugin"})},
			{Registry: "r.example", Auth: shared, Source: pluginSource, Hash: h.Hash("r.example", shared)},
			{Registry: "r.example", Auth: credential.AuthConfig{Username: "unhashed-1"}, Source: pluginSource},
			{Registry: "r.example", Auth: credential.AuthConfig{Username: "unhashed-2"}, Source: pluginSource},
		},
		err: pluginErr,
	}
	failing := keyring.Func(func(context.Context, string) ([]credential.Credential, error) {
		return nil, errors.New("plugin gcp failed: timeout")
	})

	pod := keyring.Merge(secrets, nil, keyring.Merge(node, failing), plugin)
	got, err := pod.Lookup(context.Background(), "r.example/team/app:v1")
	assert.ErrorIs(t, err, pluginErr, "errors are joined")
	assert.ErrorContains(t, err, "plugin gcp failed")
	nodeSrc := credential.Source{Kind: credential.SourceNode, Name: nodePath}
	assert.Equal(t, []summary{
		{Registry: "r.example", Source: secretSource("ns", "pull"), User: "shared"}, // secrets first, in their own order...
		{Registry: "r.example", Source: secretSource("ns", "pull"), User: "secret-wild"},
		{Registry: "r.example", Source: nodeSrc, User: "node-exact"}, // ...then the node, not re-sorted
		{Registry: "r.example", Source: nodeSrc, User: "shared"},     // the secret's credential again
		{Registry: "r.example", Source: pluginSource, User: "plugin"},
		{Registry: "r.example", Source: pluginSource, User: "shared"},
		{Registry: "r.example", Source: pluginSource, User: "unhashed-1"},
		{Registry: "r.example", Source: pluginSource, User: "unhashed-2"},
	}, summarize(got))
	assert.Equal(t, int32(1), plugin.calls.Load())
}

func TestMergeInvalidImageAsksNoKeyring(t *testing.T) {
	plugin := &fixedKeyring{}
	got, err := keyring.Merge(plugin).Lookup(context.Background(), "Not A Valid Image")
	assert.ErrorIs(t, err, keyring.ErrInvalidImage)
	assert.Nil(t, got)
	assert.Zero(t, plugin.calls.Load())
}

func TestMergeEmpty(t *testing.T) {
	got, err := keyring.Merge().Lookup(context.Background(), "alpine")
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestFuncAdapter(t *testing.T) {
	var gotImage string
	kr := keyring.Func(func(_ context.Context, image string) ([]credential.Credential, error) {
		gotImage = image
		return nil, nil
	})
	_, err := kr.Lookup(context.Background(), "alpine")
	require.NoError(t, err)
	assert.Equal(t, "alpine", gotImage)
}
