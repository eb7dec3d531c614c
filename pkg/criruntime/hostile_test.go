package criruntime_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/hostile"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// TestRegistryThatOnlyClaimsADigestGetsNothing: tenant A's private image is
// on the node; a tenant's own registry claims its manifest digest for
// evil/app:v1 (a HEAD with Docker-Content-Digest) but never serves those
// bytes. The pull fails, the name is not created, and the registry's log
// shows that the runtime asked for the bytes.
func TestRegistryThatOnlyClaimsADigestGetsNothing(t *testing.T) {
	reg := newTestRegistry(t)
	reg.addUser("alice", "alice-pw")
	reg.allow("team-a/app", "alice")
	private := randomImage(t, 2)
	reg.push(reg.ref("team-a/app:v1"), private)
	claimed := manifestDigest(t, private)
	mt, err := private.MediaType()
	require.NoError(t, err)

	tests := []struct {
		name  string
		mode  hostile.Mode
		image func(host string) string
	}{
		{name: "claims by HEAD, GET 404", mode: hostile.NoBytes, image: func(h string) string { return h + "/evil/app:v1" }},
		{name: "serves other bytes under the claimed header", mode: hostile.OtherBytes, image: func(h string) string { return h + "/evil/app:v1" }},
		{name: "other bytes as signed schema 1", mode: hostile.OtherBytesSchema1, image: func(h string) string { return h + "/evil/app:v1" }},
		{name: "pull by the claimed digest, other bytes", mode: hostile.OtherBytes, image: func(h string) string { return h + "/evil/app@" + claimed }},
		{name: "pull by the claimed digest, schema 1 header", mode: hostile.OtherBytesSchema1, image: func(h string) string { return h + "/evil/app@" + claimed }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEmbedded(t, t.TempDir())
			_, err := e.PullImage(context.Background(), spec(reg.ref("team-a/app:v1")), basic("alice", "alice-pw"), nil)
			require.NoError(t, err, "tenant A's image is on the node")
			liar, err := hostile.Start(claimed, string(mt), tt.mode)
			require.NoError(t, err)
			t.Cleanup(liar.Close)
			image := tt.image(liar.Host)

			id, err := e.PullImage(context.Background(), spec(image), basic("mallory", "mallory-pw"), nil)

			require.Error(t, err, "got image %s", id)
			assert.Empty(t, id)
			assert.Nil(t, status(t, e, image), "no name for content the registry never served")
			assert.NotNil(t, status(t, e, reg.ref("team-a/app:v1")), "tenant A's image is untouched")
			var gets int
			for _, r := range liar.Requests() {
				assert.NotEqual(t, http.MethodHead, r.Method, "a HEAD proves nothing, so none is sent")
				if r.Method == http.MethodGet && r.Path != "/v2/" {
					gets++
				}
			}
			assert.Positive(t, gets, "the runtime asked for the manifest bytes:\n%s", liar.Log())
			t.Logf("the liar's log:\n%s", liar.Log())
		})
	}
}

func TestVerifyManifest(t *testing.T) {
	reg := newTestRegistry(t)
	reg.addUser("alice", "alice-pw")
	reg.allow("team-a/app", "alice")
	img := randomImage(t, 1)
	reg.push(reg.ref("team-a/app:v1"), img)
	digest := manifestDigest(t, img)
	liar, err := hostile.Start(digest, "application/vnd.docker.distribution.manifest.v2+json", hostile.OtherBytes)
	require.NoError(t, err)
	t.Cleanup(liar.Close)
	noBytes, err := hostile.Start(digest, "application/vnd.docker.distribution.manifest.v2+json", hostile.NoBytes)
	require.NoError(t, err)
	t.Cleanup(noBytes.Close)
	other := "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

	tests := []struct {
		name     string
		image    string
		pass     string
		expected []string
		wantErr  error
	}{
		{name: "served bytes match", image: reg.ref("team-a/app:v1"), pass: "alice-pw", expected: []string{other, digest}},
		{name: "no expectation returns the digest", image: reg.ref("team-a/app:v1"), pass: "alice-pw"},
		{name: "by digest", image: reg.ref("team-a/app@" + digest), pass: "alice-pw"},
		{name: "served bytes are another manifest", image: reg.ref("team-a/app:v1"), pass: "alice-pw", expected: []string{other}, wantErr: criruntime.ErrDigestMismatch},
		{name: "refused credential", image: reg.ref("team-a/app:v1"), pass: "wrong-pw", expected: []string{digest}, wantErr: criruntime.ErrUnauthorized},
		{name: "liar: other bytes", image: liar.Host + "/evil/app:v1", expected: []string{digest}, wantErr: criruntime.ErrDigestMismatch},
		{name: "liar: by digest", image: liar.Host + "/evil/app@" + digest, wantErr: criruntime.ErrDigestMismatch},
		{name: "liar: no bytes", image: noBytes.Host + "/evil/app:v1", expected: []string{digest}, wantErr: criruntime.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := criruntime.VerifyManifest(context.Background(), tt.image, basic("alice", tt.pass), tt.expected, criruntime.WithTransport(http.DefaultTransport))
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.NotContains(t, err.Error(), "-pw")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, digest, got)
		})
	}
}

// TestRegistryServingACraftedManifestGetsNothing: a tenant's registry
// serves, honestly hashed, a manifest or index of its own that names
// tenant A's stored config and layers (or manifest) by digest, and never
// serves those blobs. The runtime makes it prove it holds them, and the
// pull fails; the name is not created.
func TestRegistryServingACraftedManifestGetsNothing(t *testing.T) {
	reg := newTestRegistry(t)
	reg.addUser("alice", "alice-pw")
	reg.allow("team-a/app", "alice")
	private := randomImage(t, 2)
	reg.push(reg.ref("team-a/app:v1"), private)
	raw, err := private.RawManifest()
	require.NoError(t, err)
	mt, err := private.MediaType()
	require.NoError(t, err)
	size := len(raw)
	digest := manifestDigest(t, private)

	tests := []struct {
		name      string
		manifest  []byte
		mediaType string
	}{
		{name: "manifest naming A's config and layers", manifest: append(raw[:len(raw)-1:len(raw)-1], []byte(`,"annotations":{"evil":"1"}}`)...), mediaType: string(mt)},
		{name: "index naming A's manifest", mediaType: "application/vnd.oci.image.index.v1+json",
			manifest: []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":%q,"size":%d,"digest":%q}]}`, mt, size, digest))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEmbedded(t, t.TempDir())
			_, err := e.PullImage(context.Background(), spec(reg.ref("team-a/app:v1")), basic("alice", "alice-pw"), nil)
			require.NoError(t, err)
			liar, err := hostile.StartCrafted(tt.manifest, tt.mediaType)
			require.NoError(t, err)
			t.Cleanup(liar.Close)
			image := liar.Host + "/evil/app:v1"

			_, err = e.PullImage(context.Background(), spec(image), nil, nil)

			require.Error(t, err)
			assert.Nil(t, status(t, e, image), "no name for content the registry never served")
			assert.NotNil(t, status(t, e, reg.ref("team-a/app:v1")))
			t.Logf("error: %v\nthe liar's log:\n%s", err, liar.Log())
		})
	}
}

// TestNewImageSharingStoredLayersProvesThemCheaply: a legitimate new image
// that shares stored layers costs one small ranged request per shared
// layer, not a download.
func TestNewImageSharingStoredLayersProvesThemCheaply(t *testing.T) {
	reg := newTestRegistry(t)
	reg.makePublic("public/a")
	reg.makePublic("public/b")
	base := randomImage(t, 2)
	extra, err := random.Layer(256, types.DockerLayer)
	require.NoError(t, err)
	derived, err := mutate.AppendLayers(base, extra)
	require.NoError(t, err)
	reg.push(reg.ref("public/a:v1"), base)
	reg.push(reg.ref("public/b:v1"), derived)
	e := newEmbedded(t, t.TempDir())
	_, err = e.PullImage(context.Background(), spec(reg.ref("public/a:v1")), nil, nil)
	require.NoError(t, err)
	reg.reset()

	id, err := e.PullImage(context.Background(), spec(reg.ref("public/b:v1")), nil, nil)

	require.NoError(t, err)
	assert.Equal(t, configDigest(t, derived), id)
	// the new config and layer are downloaded; each of the 2 shared layers is proven by one request
	assert.Equal(t, 4, reg.count(kindBlob), "%v", reg.requests())
}
