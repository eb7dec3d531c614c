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

func TestAllowlist(t *testing.T) {
	a, err := NewAllowlist([]string{
		"alpine",
		"registry.example/team/app",
		"registry.example/shared/*",
		"mirror.example:5000/*",
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
	}
	for _, tt := range tests {
		t.Run(tt.repo, func(t *testing.T) {
			assert.Equal(t, tt.want, a.Match(tt.repo))
		})
	}
	hub, err := NewAllowlist([]string{"Index.Docker.IO/*"})
	require.NoError(t, err)
	assert.True(t, hub.Match("docker.io/library/redis"), "a bare registry host allows all of it")
	assert.False(t, hub.Match("registry.example/library/redis"))

	var none *Allowlist
	assert.False(t, none.Match("docker.io/library/alpine"))
}

func TestAllowlistInvalid(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		wantMsg string
	}{
		{name: "empty", pattern: "", wantMsg: "preloadedImagesVerificationAllowlist[1]"},
		{name: "tag", pattern: "alpine:3", wantMsg: "must not have a tag or digest"},
		{name: "digest", pattern: "alpine@" + testDigest, wantMsg: "must not have a tag or digest"},
		{name: "inner glob", pattern: "registry.example/*/app", wantMsg: "only a trailing"},
		{name: "host glob", pattern: "*.example/app", wantMsg: "only a trailing"},
		{name: "bare star", pattern: "/*", wantMsg: "registry host or repository path"},
		{name: "uppercase path", pattern: "registry.example/Team/*", wantMsg: "not a repository path"},
		{name: "double star", pattern: "registry.example/**", wantMsg: "only a trailing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewAllowlist([]string{"alpine", tt.pattern})
			require.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}
