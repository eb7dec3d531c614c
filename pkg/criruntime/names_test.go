package criruntime_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

func TestNormalizeImage(t *testing.T) {
	digest := "sha256:" + zeros
	tests := []struct {
		image   string
		want    string
		wantErr bool
	}{
		{image: "alpine", want: "docker.io/library/alpine:latest"},
		{image: "alpine:3.20", want: "docker.io/library/alpine:3.20"},
		{image: "docker.io/alpine", want: "docker.io/library/alpine:latest"},
		{image: "index.docker.io/library/alpine:3", want: "docker.io/library/alpine:3"},
		{image: "team-a/app:v1", want: "docker.io/team-a/app:v1"},
		{image: "registry.example/team-a/app:v1", want: "registry.example/team-a/app:v1"},
		{image: "127.0.0.1:5000/team-a/app", want: "127.0.0.1:5000/team-a/app:latest"},
		{image: "localhost/app", want: "localhost/app:latest"},
		{image: "alpine@" + digest, want: "docker.io/library/alpine@" + digest},
		{image: "alpine:3@" + digest, want: "docker.io/library/alpine@" + digest},
		{image: "", wantErr: true},
		{image: "Alpine", wantErr: true},
		{image: digest, wantErr: true},
		{image: "alpine@sha256:short", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			got, err := criruntime.NormalizeImage(tt.image)
			if tt.wantErr {
				assert.ErrorIs(t, err, criruntime.ErrInvalidReference)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestImageNames(t *testing.T) {
	img := &runtimeapi.Image{RepoTags: []string{"a:1", "b:2"}, RepoDigests: []string{"a@sha256:" + zeros}}
	assert.Equal(t, []string{"a:1", "b:2", "a@sha256:" + zeros}, criruntime.ImageNames(img))
	assert.Nil(t, criruntime.ImageNames(nil))
}

func FuzzNormalizeImage(f *testing.F) {
	for _, s := range []string{"alpine", "127.0.0.1:5000/a/b:v1", "a@sha256:" + zeros, "docker.io/x", "::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		got, err := criruntime.NormalizeImage(image)
		if err != nil {
			return
		}
		again, err := criruntime.NormalizeImage(got)
		require.NoError(t, err, "a normalized name parses")
		assert.Equal(t, got, again, "normalizing is idempotent")
	})
}
