package keyring_test

import (
	"context"
	"errors"
	"testing"

	"github.com/distribution/reference"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/imageref"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// TestKeyMatchingAsTheKubelet: docker config keys are filed and matched as
// the kubelet's BasicDockerKeyring files and matches them: the key's path
// is a string prefix of the image's, so a key written with a trailing
// slash matches only repositories under it and "team" matches
// "teammate"; hosts are compared as written; Docker Hub's aliases are not
// folded. Expected values are the kubelet's, written in (test/kubelet
// compares with the kubelet's own keyring).
func TestKeyMatchingAsTheKubelet(t *testing.T) {
	tests := []struct {
		key, image string
		want       bool
	}{
		{key: "reg.example/team/", image: "reg.example/team:v1", want: false},
		{key: "reg.example/team/", image: "reg.example/team/app:v1", want: true},
		{key: "reg.example/team/", image: "reg.example/teammate/app:v1", want: false},
		{key: "reg.example/team", image: "reg.example/team:v1", want: true},
		{key: "reg.example/team", image: "reg.example/team/app:v1", want: true},
		{key: "reg.example/team", image: "reg.example/teammate/app:v1", want: true},
		{key: "reg.example/", image: "reg.example/app:v1", want: true},
		{key: "https://reg.example/v2/team", image: "reg.example/team/app", want: true},
		{key: "http://reg.example/v1/", image: "reg.example/app", want: true},
		{key: "Node.Example:5000", image: "node.example:5000/app", want: false},
		{key: "registry-1.docker.io", image: "docker.io/tenant-a/app", want: false},
		{key: "registry-1.docker.io", image: "tenant-a/app", want: false},
		{key: "docker.io", image: "tenant-a/app", want: true},
		{key: "docker.io/tenant-a", image: "tenant-a/app", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.key+" "+tt.image, func(t *testing.T) {
			h := testHasher(t)
			kr, err := keyring.NewStatic(h, pluginSource, map[string]credential.AuthConfig{
				tt.key:                     {Username: "u", Password: "pw-s3cret-Qz8"},
				"never.example.invalid/xx": {Username: "other", Password: "pw-s3cret-Qz8"},
			})
			require.NoError(t, err)
			got, err := kr.Lookup(context.Background(), tt.image)
			require.NoError(t, err)
			assert.Equal(t, tt.want, len(got) == 1)
		})
	}
}

// TestParseImageAsTheKubelet: the keyring accepts and rejects image names
// exactly as the kubelet (distribution/reference) does, with its reasons.
func TestParseImageAsTheKubelet(t *testing.T) {
	tests := []struct {
		image        string
		wantRegistry string // "" when the kubelet rejects the name
		wantRepo     string
		wantReason   error
	}{
		{image: "a//b", wantReason: reference.ErrReferenceInvalidFormat},
		{image: "registry.io/myorg/", wantReason: reference.ErrReferenceInvalidFormat},
		{image: "/abc", wantReason: reference.ErrReferenceInvalidFormat},
		{image: "host:5000/a___b:1", wantReason: reference.ErrReferenceInvalidFormat},
		{image: "UPPER/Case", wantReason: reference.ErrNameContainsUppercase},
		{image: "LOCALHOST/x:1", wantRegistry: "localhost", wantRepo: "x"},
		{image: "a_b.example/app", wantRegistry: "a_b.example", wantRepo: "app"},
		{image: "reg.example:123456/app", wantRegistry: "reg.example:123456", wantRepo: "app"},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			im, err := keyring.ParseImage(tt.image)
			if tt.wantReason != nil {
				require.Error(t, err)
				assert.ErrorIs(t, err, keyring.ErrInvalidImage)
				assert.ErrorIs(t, err, imageref.ErrInvalid)
				assert.True(t, errors.Is(err, tt.wantReason), "reason of %v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantRegistry, im.Registry)
			assert.Equal(t, tt.wantRepo, im.Repository)
		})
	}
}

// TestCheckMatch: invalid input is an error, not a silent "no match".
func TestCheckMatch(t *testing.T) {
	tests := []struct {
		pattern, image string
		want           bool
		wantErr        error
	}{
		{pattern: "registry.example", image: "registry.example/app", want: true},
		{pattern: "registry.example", image: "other.example/app", want: false},
		{pattern: "registry.example", image: "a//b", wantErr: keyring.ErrInvalidImage},
		{pattern: "registry.example", image: "UPPER/Case", wantErr: reference.ErrNameContainsUppercase},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.image, func(t *testing.T) {
			got, err := keyring.CheckMatch(tt.pattern, tt.image)
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	_, err := keyring.CheckMatch("reg example", "reg.example/a/x")
	var pe *keyring.PatternError
	assert.ErrorAs(t, err, &pe)
}
