package credtracker

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		in      string
		want    Policy
		wantErr bool
	}{
		{in: "", want: NeverVerifyPreloadedImages},
		{in: "NeverVerify", want: NeverVerify},
		{in: "NeverVerifyPreloadedImages", want: NeverVerifyPreloadedImages},
		{in: "NeverVerifyAllowlistedImages", want: NeverVerifyAllowlistedImages},
		{in: "AlwaysVerify", want: AlwaysVerify},
		{in: "alwaysverify", wantErr: true},
		{in: "Sometimes", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePolicy(tt.in)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrInvalidPolicy)
				assert.Contains(t, err.Error(), tt.in)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestAllowlist: every pattern the kubelet's validation accepts is
// accepted (pullmanager's getAllowlistImagePattern), and matched against
// normalized repository names: a familiar name ("alpine") or a Docker Hub
// prefix ("bitnami/*") means the repository the pod's name normalizes to,
// whatever spelling the pod uses.
func TestAllowlist(t *testing.T) {
	a, err := NewAllowlist([]string{
		"docker.io/library/alpine",
		"ubuntu",
		"bitnami/redis",
		"registry.example/team/app",
		"registry.example/shared/*",
		"mirror.example:5000/*",
		"docker.io/grafana/*",
		"bitnami/*",
		"localhost/*",
	})
	require.NoError(t, err)
	tests := []struct {
		repo string
		want bool
	}{
		{repo: "docker.io/library/alpine", want: true},
		{repo: "docker.io/library/alpine2", want: false},
		{repo: "docker.io/library/ubuntu", want: true},
		{repo: "docker.io/library/ubuntu2", want: false},
		{repo: "docker.io/ubuntu/ubuntu", want: false},
		{repo: "registry.example/ubuntu", want: false},
		{repo: "registry.example/team/app", want: true},
		{repo: "registry.example/team/app/sub", want: false},
		{repo: "registry.example/team/other", want: false},
		{repo: "registry.example/shared/x", want: true},
		{repo: "registry.example/shared/x/y", want: true},
		{repo: "registry.example/sharedx/y", want: false},
		{repo: "mirror.example:5000/anything/at/all", want: true},
		{repo: "mirror.example/anything", want: false},
		{repo: "docker.io/grafana/grafana", want: true},
		{repo: "docker.io/bitnami/redis", want: true},
		{repo: "docker.io/bitnami/postgresql", want: true},
		{repo: "docker.io/library/redis", want: false},
		{repo: "localhost/tool", want: true},
		{repo: "bitnami/redis", want: false}, // never a normalized name
	}
	for _, tt := range tests {
		t.Run(tt.repo, func(t *testing.T) {
			assert.Equal(t, tt.want, a.Match(tt.repo))
		})
	}
	assert.Empty(t, a.Unmatchable())

	// Docker Hub's other host names are Docker Hub.
	hub, err := NewAllowlist([]string{"index.docker.io/*"})
	require.NoError(t, err)
	assert.True(t, hub.Match("docker.io/library/redis"))
	assert.True(t, hub.Match("docker.io/bitnami/redis"))
	assert.False(t, hub.Match("registry.example/redis"))
	assert.Empty(t, hub.Unmatchable())

	// The kubelet accepts a prefix that starts no repository name; so does
	// pullguard, and reports it.
	odd, err := NewAllowlist([]string{"registry.example//*", "team_/*"})
	require.NoError(t, err)
	assert.False(t, odd.Match("registry.example/app"))
	assert.False(t, odd.Match("docker.io/team_/app"))
	assert.Equal(t, []string{"registry.example//*", "team_/*"}, odd.Unmatchable())

	var none *Allowlist
	assert.False(t, none.Match("docker.io/library/alpine"))
}

// TestAllowlistFamiliarNameFreesEverySpelling: the kubelet accepts
// "ubuntu" and frees a pod's "ubuntu", "ubuntu:tag" and "ubuntu@sha256:...";
// pullguard frees the same three, and "docker.io/library/ubuntu:tag" too
// (one repository, whatever its spelling).
func TestAllowlistFamiliarNameFreesEverySpelling(t *testing.T) {
	a, err := NewAllowlist([]string{"ubuntu", "bitnami/*"})
	require.NoError(t, err)
	for _, image := range []string{
		"ubuntu", "ubuntu:24.04", "ubuntu@" + testDigest, "ubuntu:24.04@" + testDigest,
		"docker.io/library/ubuntu:24.04", "library/ubuntu", "index.docker.io/library/ubuntu",
		"bitnami/redis:7", "docker.io/bitnami/redis@" + testDigest,
	} {
		repo, err := RepositoryName(image)
		require.NoError(t, err, image)
		assert.True(t, a.Match(repo), "%s (%s) should be allowlisted", image, repo)
	}
	for _, image := range []string{"ubuntu2", "registry.example/ubuntu", "canonical/ubuntu", "redis"} {
		repo, err := RepositoryName(image)
		require.NoError(t, err, image)
		assert.False(t, a.Match(repo), "%s (%s) must not be allowlisted", image, repo)
	}
}

// TestAllowlistInvalid: the kubelet's getAllowlistImagePattern refuses each
// of these (its reasons written in as data).
func TestAllowlistInvalid(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		wantMsg string
	}{
		{name: "empty", pattern: "", wantMsg: "the supplied pattern is too short"},
		{name: "tag", pattern: "docker.io/library/alpine:3", wantMsg: "neither tag nor digest is accepted"},
		{name: "digest", pattern: "docker.io/library/alpine@" + testDigest, wantMsg: "neither tag nor digest is accepted"},
		{name: "familiar name with a tag", pattern: "alpine:3", wantMsg: "neither tag nor digest is accepted"},
		{name: "trailing slash", pattern: "registry.io/myorg/", wantMsg: "failed to parse as an image name: couldn't parse image name \"registry.io/myorg/\": invalid reference format"},
		{name: "inner glob", pattern: "registry.example/*/app", wantMsg: "only patterns ending with '/*' are allowed"},
		{name: "host glob", pattern: "*.example/app", wantMsg: "only patterns ending with '/*' are allowed"},
		{name: "bare star", pattern: "/*", wantMsg: "at least registry hostname is required"},
		{name: "star", pattern: "*", wantMsg: "only patterns ending with '/*' are allowed"},
		{name: "double star", pattern: "registry.example/**", wantMsg: "only patterns ending with '/*' are allowed"},
		{name: "leading space", pattern: " registry.example/*", wantMsg: "leading/trailing spaces are not allowed"},
		{name: "uppercase", pattern: "registry.example/Team/app", wantMsg: "repository name (Team/app) must be lowercase"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewAllowlist([]string{"docker.io/library/alpine", tt.pattern})
			require.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Contains(t, err.Error(), "preloadedImagesVerificationAllowlist[1]")
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}
