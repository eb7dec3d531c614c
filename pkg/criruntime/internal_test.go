package criruntime

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestRegistryFailure(t *testing.T) {
	auth := &runtimeapi.AuthConfig{Username: "alice", Password: "s3cret-pw", IdentityToken: "id-token-xyz"}
	head := &http.Request{Method: http.MethodHead, URL: &url.URL{Scheme: "http", Host: "r.example", Path: "/v2/a/manifests/v1"}}
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantKind   error
		want       string
	}{
		{name: "head 401", err: &transport.Error{StatusCode: 401, Request: head}, wantStatus: 401, wantKind: ErrUnauthorized,
			want: "HEAD http://r.example/v2/a/manifests/v1: unexpected status code 401 Unauthorized (HEAD responses have no body, use GET for details)"},
		{name: "structured 401 gains its status", wantStatus: 401, wantKind: ErrUnauthorized,
			err:  &transport.Error{StatusCode: 401, Errors: []transport.Diagnostic{{Code: transport.UnauthorizedErrorCode, Message: "authentication required"}}},
			want: "401 Unauthorized: UNAUTHORIZED: authentication required"},
		{name: "403", err: &transport.Error{StatusCode: 403}, wantStatus: 403, wantKind: ErrUnauthorized, want: "unexpected status code 403 Forbidden"},
		{name: "404", err: &transport.Error{StatusCode: 404}, wantStatus: 404, wantKind: ErrNotFound, want: "unexpected status code 404 Not Found"},
		{name: "secrets are scrubbed", err: errors.New("token id-token-xyz for s3cret-pw refused"), want: "token <redacted> for <redacted> refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := registryFailure(tt.err, auth)
			assert.Equal(t, tt.want, got.Error())
			assert.Equal(t, tt.wantStatus, StatusCode(got))
			if tt.wantKind != nil {
				assert.ErrorIs(t, got, tt.wantKind)
			}
			var te *transport.Error
			assert.False(t, errors.As(got, &te), "the unscrubbed error is not reachable")
		})
	}
}

func TestMediaTypeOf(t *testing.T) {
	tests := []struct {
		name      string
		announced types.MediaType
		raw       string
		want      types.MediaType
	}{
		{name: "announced", announced: types.DockerManifestList, raw: `{}`, want: types.DockerManifestList},
		{name: "generic content type", announced: "application/json", raw: `{"mediaType":"` + string(types.DockerManifestSchema2) + `"}`, want: types.DockerManifestSchema2},
		{name: "oci index without media type", raw: `{"schemaVersion":2,"manifests":[]}`, want: types.OCIImageIndex},
		{name: "oci manifest without media type", raw: `{"schemaVersion":2,"config":{}}`, want: types.OCIManifestSchema1},
		{name: "schema 1", announced: types.DockerManifestSchema1Signed, want: types.DockerManifestSchema1Signed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, mediaTypeOf(tt.announced, []byte(tt.raw)))
		})
	}
}

func TestImageUser(t *testing.T) {
	uid := func(v int64) *int64 { return &v }
	tests := []struct {
		user     string
		wantUID  *int64
		wantName string
	}{
		{user: ""},
		{user: "0", wantUID: uid(0)},
		{user: "1000:1000", wantUID: uid(1000)},
		{user: "nginx", wantName: "nginx"},
		{user: "nginx:web", wantName: "nginx"},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			gotUID, gotName := imageUser(tt.user)
			assert.Equal(t, tt.wantUID, gotUID)
			assert.Equal(t, tt.wantName, gotName)
		})
	}
}

func TestDecodeImageIndex(t *testing.T) {
	d := "sha256:" + "1111111111111111111111111111111111111111111111111111111111111111"
	tests := []struct {
		name    string
		data    string
		wantErr string
	}{
		{name: "empty object", data: `{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"ImageIndex"}`},
		{name: "wrong kind", data: `{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"Other"}`, wantErr: "unsupported image index"},
		{name: "dangling name", data: `{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"ImageIndex","names":{"a/b:v1":"` + d + `"}}`,
			wantErr: "unknown target"},
		{name: "null target", data: `{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"ImageIndex","targets":{"` + d + `":null}}`,
			wantErr: "empty target"},
		{name: "bad digest", data: `{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"ImageIndex","names":{"a":"md5:x"}}`,
			wantErr: "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idx, err := decodeImageIndex([]byte(tt.data))
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Empty(t, idx.list)
		})
	}
}

func FuzzDecodeImageIndex(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"ImageIndex"}`))
	f.Add([]byte(`{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"ImageIndex","names":{"r/a:v1":"sha256:` +
		"1111111111111111111111111111111111111111111111111111111111111111" + `"},"targets":{"sha256:` +
		"1111111111111111111111111111111111111111111111111111111111111111" + `":{"config":"sha256:` +
		"2222222222222222222222222222222222222222222222222222222222222222" + `"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := decodeImageIndex(data)
		if err != nil {
			return
		}
		for n := range idx.Names {
			img := idx.lookup(n)
			require.NotNil(t, img, "every name of a decoded index resolves")
			assert.Contains(t, append(img.repoTags, img.repoDigests...), n)
		}
	})
}
