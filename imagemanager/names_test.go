package imagemanager_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/imagemanager"
)

// TestImageNamesAsTheKubelet: the kubelet's EnsureImageExists parses the
// image with distribution/reference before asking the runtime; what it
// rejects is InvalidImageName with an InspectFailed warning carrying
// "Failed to apply default image tag %q: couldn't parse image name %q:
// <reason>". The expected reasons are distribution/reference's, written in.
func TestImageNamesAsTheKubelet(t *testing.T) {
	tests := []struct {
		image   string
		wantMsg string // "" when the kubelet accepts the name
	}{
		{image: "host:5000/a//b:1", wantMsg: `Failed to apply default image tag "host:5000/a//b:1": couldn't parse image name "host:5000/a//b:1": invalid reference format`},
		{image: "host:5000/a___b:1", wantMsg: `Failed to apply default image tag "host:5000/a___b:1": couldn't parse image name "host:5000/a___b:1": invalid reference format`},
		{image: "UPPER/Case", wantMsg: `couldn't parse image name "UPPER/Case": invalid reference format: repository name (Case) must be lowercase`},
		{image: "registry.io/myorg/", wantMsg: `couldn't parse image name "registry.io/myorg/": invalid reference format`},
		{image: "/abc", wantMsg: `couldn't parse image name "/abc": invalid reference format`},
		{image: "app@sha256:abc", wantMsg: `couldn't parse image name "app@sha256:abc": invalid reference format`},
		{image: "app@sha256:" + "0123456789abcdef0123456789abcdef0", wantMsg: "invalid checksum digest length"},
		{image: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", wantMsg: "cannot specify 64-byte hexadecimal strings"},
		{image: "LOCALHOST/x:1"},
		{image: "Registry.Example/team/app:v1"},
		{image: "a_b.example/app:v1"},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			e := newEnv(t, true)
			res, err := e.ensure(pod("team-a", "p1"), tt.image, corev1.PullIfNotPresent)
			evs := e.events()
			if tt.wantMsg == "" {
				assert.NotErrorIs(t, err, imagemanager.ErrInvalidImageName)
				assert.NotContains(t, reasons(evs), imagemanager.ReasonInspectFailed)
				return
			}
			require.ErrorIs(t, err, imagemanager.ErrInvalidImageName)
			require.Len(t, evs, 1)
			assert.Equal(t, event{corev1.EventTypeWarning, imagemanager.ReasonInspectFailed, evs[0].Message}, evs[0])
			assert.Contains(t, evs[0].Message, tt.wantMsg)
			assert.Equal(t, evs[0].Message, res.Message)
			assert.Empty(t, e.rt.Pulls(), "an invalid name never reaches the runtime")
		})
	}
}
