package registry_test

import (
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/registry"
)

func TestImageIsDeterministic(t *testing.T) {
	a, err := registry.Image(7, 2, 64)
	require.NoError(t, err)
	b, err := registry.Image(7, 2, 64)
	require.NoError(t, err)
	c, err := registry.Image(8, 2, 64)
	require.NoError(t, err)
	da, err := a.Digest()
	require.NoError(t, err)
	db, err := b.Digest()
	require.NoError(t, err)
	dc, err := c.Digest()
	require.NoError(t, err)
	assert.Equal(t, da, db)
	assert.NotEqual(t, da, dc)
}

func TestPushDescribesTheImage(t *testing.T) {
	r := newRegistry(t, fixture())
	img, err := registry.Image(3, 2, 64)
	require.NoError(t, err)
	p, err := r.Push(t.Context(), "team-a/app", "v1", img)
	require.NoError(t, err)

	d, err := img.Digest()
	require.NoError(t, err)
	cfg, err := img.ConfigName()
	require.NoError(t, err)
	assert.Equal(t, d.String(), p.Digest)
	assert.Equal(t, cfg.String(), p.ConfigDigest)
	assert.Len(t, p.Layers, 2)
	assert.Equal(t, r.Host()+"/team-a/app:v1", p.Reference)
	assert.Equal(t, r.Host()+"/team-a/app@"+p.Digest, p.DigestReference)
	assert.Equal(t, r.Ref("team-a/app", "v1"), p.Reference)
	assert.Equal(t, r.Ref("team-a/app", p.Digest), p.DigestReference)
	assert.Positive(t, r.Count(registry.Filter{User: registry.AdminUser, Kind: registry.KindUpload}))
}

func TestCopySameDigestTwoNames(t *testing.T) {
	r := newRegistry(t, fixture())
	orig, err := r.Push(t.Context(), "team-a/base", "v1", mustImage(t, 9))
	require.NoError(t, err)
	cp, err := r.Copy(t.Context(), "team-a/base:v1", "public/base", "v1")
	require.NoError(t, err)
	assert.Equal(t, orig.Digest, cp.Digest)
	assert.Equal(t, orig.ConfigDigest, cp.ConfigDigest)

	byDigest, err := r.Copy(t.Context(), "team-a/base@"+orig.Digest, "shared/app", "v1")
	require.NoError(t, err)
	assert.Equal(t, orig.Digest, byDigest.Digest)

	// Anonymous reads the public name, not the private one.
	for _, tt := range []struct {
		ref  string
		want int
	}{
		{ref: cp.DigestReference, want: http.StatusOK},
		{ref: orig.DigestReference, want: http.StatusUnauthorized},
	} {
		ref, err := name.ParseReference(tt.ref, name.Insecure)
		require.NoError(t, err)
		desc, err := remote.Head(ref)
		if tt.want == http.StatusOK {
			require.NoError(t, err)
			assert.Equal(t, orig.Digest, desc.Digest.String())
		} else {
			assert.ErrorContains(t, err, "401 Unauthorized")
		}
	}
}
