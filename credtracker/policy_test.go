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

// TestAllowlist: the kubelet's matching (pullmanager's
// NeverVerifyAllowlistedImages): exact normalized names, and "/*" prefixes
// compared with the normalized name as written.
func TestAllowlist(t *testing.T) {
	a, err := NewAllowlist([]string{
		"docker.io/library/alpine",
		"registry.example/team/app",
		"registry.example/shared/*",
		"mirror.example:5000/*",
		"docker.io/bitnami/*",
		"bitnami/*",
	})
	require.NoError(t, err)
	tests := []struct {
		repo string
		want bool
	}{
		{repo: "docker.io/library/alpine", want: true},
		{repo: "docker.io/library/alpine2", want: false},
		{repo: "registry.example/team/app", want: true},
		{repo: "registry.example/team/app/sub", want: false},
		{repo: "registry.example/team/other", want: false},
		{repo: "registry.example/shared/x", want: true},
		{repo: "registry.example/shared/x/y", want: true},
		{repo: "registry.example/sharedx/y", want: false},
		{repo: "mirror.example:5000/anything/at/all", want: true},
		{repo: "mirror.example/anything", want: false},
		{repo: "docker.io/bitnami/redis", want: true},
		{repo: "docker.io/library/redis", want: false},
		{repo: "bitnami/redis", want: true}, // never a normalized name
	}
	for _, tt := range tests {
		t.Run(tt.repo, func(t *testing.T) {
			assert.Equal(t, tt.want, a.Match(tt.repo))
		})
	}
	assert.Equal(t, []string{"bitnami/*"}, a.Unmatchable(), "the kubelet accepts a prefix no normalized name has; pullguard reports it")

	// The prefix is not normalized, as in the kubelet: index.docker.io
	// never starts a normalized name.
	hub, err := NewAllowlist([]string{"index.docker.io/*"})
	require.NoError(t, err)
	assert.False(t, hub.Match("docker.io/library/redis"))
	assert.Equal(t, []string{"index.docker.io/*"}, hub.Unmatchable())

	var none *Allowlist
	assert.False(t, none.Match("docker.io/library/alpine"))
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
		{name: "familiar name", pattern: "alpine", wantMsg: `the kubelet accepts only "docker.io/library/alpine"`},
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
