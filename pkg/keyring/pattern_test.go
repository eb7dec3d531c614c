package keyring_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/keyring"
)

func TestMatchImage(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		image   string
		want    bool
	}{
		// The kubelet's own URL-matching cases (pkg/credentialprovider).
		{name: "upstream: leading wildcard label", pattern: "*.kubernetes.io", image: "prefix.kubernetes.io/app", want: true},
		{name: "upstream: middle wildcard label", pattern: "prefix.*.io", image: "prefix.kubernetes.io/app", want: true},
		{name: "upstream: top-level wildcard", pattern: "prefix.kubernetes.*", image: "prefix.kubernetes.io/app", want: true},
		{name: "upstream: partial label wildcard", pattern: "*-good.kubernetes.io", image: "prefix-good.kubernetes.io/app", want: true},
		{name: "upstream: wildcard with path", pattern: "*.kubernetes.io/blah", image: "prefix.kubernetes.io/blah", want: true},
		{name: "upstream: path prefix", pattern: "prefix.*.io/foo", image: "prefix.kubernetes.io/foo/bar", want: true},
		{name: "upstream: path and port", pattern: "*.kubernetes.io:1111/blah", image: "prefix.kubernetes.io:1111/blah", want: true},
		{name: "upstream: path prefix and port", pattern: "prefix.*.io:1111/foo", image: "prefix.kubernetes.io:1111/foo/bar", want: true},
		{name: "upstream: wildcard needs its label", pattern: "*.kubernetes.io", image: "kubernetes.io/app", want: false},
		{name: "upstream: too many labels in pattern", pattern: "*.*.kubernetes.io", image: "prefix.kubernetes.io/app", want: false},
		{name: "upstream: two wildcards, bare domain", pattern: "*.*.kubernetes.io", image: "kubernetes.io/app", want: false},
		{name: "upstream: different tld", pattern: "kubernetes.io", image: "kubernetes.com/app", want: false},
		{name: "upstream: partial wildcard mismatch", pattern: "k*.io", image: "quay.io/app", want: false},
		{name: "upstream: port mismatch", pattern: "*.kubernetes.io:1234/blah", image: "prefix.kubernetes.io:1111/blah", want: false},
		{name: "upstream: pattern without port, image with port", pattern: "prefix.*.io/foo", image: "prefix.kubernetes.io:1111/foo/bar", want: false},

		// The documented matchImages examples (kubelet credential provider page).
		{name: "docs: ecr account host", pattern: "123456789.dkr.ecr.us-east-1.amazonaws.com", image: "123456789.dkr.ecr.us-east-1.amazonaws.com/app:v1", want: true},
		{name: "docs: azurecr", pattern: "*.azurecr.io", image: "myregistry.azurecr.io/team/app", want: true},
		{name: "docs: gcr", pattern: "gcr.io", image: "gcr.io/project/app@sha256:" + sha, want: true},
		{name: "docs: two wildcard labels", pattern: "*.*.registry.io", image: "a.b.registry.io/app", want: true},
		{name: "docs: two wildcard labels, one short", pattern: "*.*.registry.io", image: "a.registry.io/app", want: false},
		{name: "docs: port and path", pattern: "registry.io:8080/path", image: "registry.io:8080/path/app", want: true},
		{name: "docs: port and path, no port in image", pattern: "registry.io:8080/path", image: "registry.io/path/app", want: false},
		{name: "docs: star dot io spans one label only", pattern: "*.io", image: "a.b.io/app", want: false},
		{name: "docs: star dot io", pattern: "*.io", image: "k8s.io/app", want: true},
		{name: "docs: k8s dot star", pattern: "k8s.*", image: "k8s.io/app", want: true},
		{name: "docs: app star", pattern: "app*.k8s.io", image: "app1.k8s.io/x", want: true},
		{name: "docs: app star matches empty run", pattern: "app*.k8s.io", image: "app.k8s.io/x", want: true},
		{name: "docs: app star needs its prefix", pattern: "app*.k8s.io", image: "web.k8s.io/x", want: false},
		{name: "docs: ecr glob", pattern: "*.dkr.ecr.*.amazonaws.com", image: "1234.dkr.ecr.eu-west-1.amazonaws.com/app", want: true},
		{name: "docs: ecr glob, cn partition is one label more", pattern: "*.dkr.ecr.*.amazonaws.com", image: "1234.dkr.ecr.cn-north-1.amazonaws.com.cn/app", want: false},

		// Port rules.
		{name: "pattern with port, image without", pattern: "registry.example:5000", image: "registry.example/app", want: false},
		{name: "same port", pattern: "registry.example:5000", image: "registry.example:5000/app", want: true},
		{name: "localhost with port", pattern: "localhost:5000", image: "localhost:5000/app", want: true},
		{name: "ip with port", pattern: "127.0.0.1:5000", image: "127.0.0.1:5000/app", want: true},
		{name: "ip wildcard labels", pattern: "10.*.*.*:5000", image: "10.1.2.3:5000/app", want: true},
		{name: "ipv6 literal", pattern: "[::1]:5000", image: "[::1]:5000/app", want: true},

		// Path rules.
		{name: "path equal to repository", pattern: "registry.example/team/app", image: "registry.example/team/app:v1", want: true},
		{name: "path prefix on whole segments only", pattern: "registry.example/team", image: "registry.example/teammate/app", want: false},
		{name: "longer path than image", pattern: "registry.example/team/app/sub", image: "registry.example/team/app", want: false},
		{name: "trailing slash ignored", pattern: "registry.example/team/", image: "registry.example/team/app", want: true},
		{name: "host pattern matches any path", pattern: "registry.example", image: "registry.example/a/b/c", want: true},
		{name: "tag and digest ignored", pattern: "registry.example/team/app", image: "registry.example/team/app:v1@sha256:" + sha, want: true},

		// Case and schemes.
		{name: "pattern host upper case", pattern: "Registry.EXAMPLE", image: "registry.example/app", want: true},
		{name: "image host upper case", pattern: "registry.example", image: "Registry.Example/app", want: true},
		{name: "wildcard with upper case", pattern: "*.Example.COM", image: "REG.example.com/app", want: true},
		{name: "https scheme stripped", pattern: "https://registry.example", image: "registry.example/app", want: true},
		{name: "http scheme stripped", pattern: "HTTP://registry.example/team", image: "registry.example/team/app", want: true},

		// Docker Hub.
		{name: "hub: bare name", pattern: "docker.io", image: "alpine", want: true},
		{name: "hub: library path", pattern: "docker.io/library", image: "alpine:3.20", want: true},
		{name: "hub: user repository", pattern: "docker.io/myorg", image: "myorg/app", want: true},
		{name: "hub: index alias pattern", pattern: "index.docker.io", image: "alpine", want: true},
		{name: "hub: registry-1 alias pattern", pattern: "registry-1.docker.io", image: "docker.io/library/alpine", want: true},
		{name: "hub: index alias in image", pattern: "docker.io", image: "index.docker.io/library/alpine", want: true},
		{name: "hub: https index v1 key", pattern: "https://index.docker.io", image: "alpine", want: true},
		{name: "hub: not another registry", pattern: "docker.io", image: "quay.io/app", want: false},
		{name: "hub: wildcard subdomain does not match hub", pattern: "*.docker.io", image: "alpine", want: false},
		{name: "hub: library is explicit in paths", pattern: "docker.io/alpine", image: "alpine", want: false},
		{name: "hub: localhost is a registry", pattern: "docker.io", image: "localhost/app", want: false},

		// Invalid input matches nothing.
		{name: "empty pattern", pattern: "", image: "registry.example/app", want: false},
		{name: "empty image", pattern: "registry.example", image: "", want: false},
		{name: "wildcard in path", pattern: "registry.example/*", image: "registry.example/app", want: false},
		{name: "wildcard in port", pattern: "registry.example:*", image: "registry.example:5000/app", want: false},
		{name: "empty label", pattern: "registry..example", image: "registry..example/app", want: false},
		{name: "image with scheme", pattern: "registry.example", image: "https://registry.example/app", want: false},
		{name: "upper-case repository", pattern: "registry.example", image: "registry.example/App", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, keyring.MatchImage(tt.pattern, tt.image), "MatchImage(%q, %q)", tt.pattern, tt.image)
		})
	}
}

const sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func TestParsePatternErrors(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
	}{
		{name: "empty", pattern: ""},
		{name: "scheme only", pattern: "https://"},
		{name: "path only", pattern: "/team/app"},
		{name: "wildcard in path", pattern: "registry.example/team/*"},
		{name: "wildcard in port", pattern: "registry.example:5*"},
		{name: "non-numeric port", pattern: "registry.example:http"},
		{name: "port too long", pattern: "registry.example:123456"},
		{name: "empty port", pattern: "registry.example:"},
		{name: "empty label", pattern: ".example"},
		{name: "trailing dot", pattern: "registry.example."},
		{name: "empty path segment", pattern: "registry.example/team//app"},
		{name: "upper-case path", pattern: "registry.example/Team"},
		{name: "space in host", pattern: "registry example"},
		{name: "query", pattern: "registry.example/app?x=1"},
		{name: "unterminated ipv6", pattern: "[::1:5000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := keyring.ParsePattern(tt.pattern)
			require.Error(t, err)
			assert.ErrorIs(t, err, keyring.ErrInvalidPattern)
			var perr *keyring.PatternError
			require.ErrorAs(t, err, &perr)
			assert.Equal(t, tt.pattern, perr.Pattern)
		})
	}
}

func TestParsePatternString(t *testing.T) {
	p, err := keyring.ParsePattern("https://*.Example.com:5000/team")
	require.NoError(t, err)
	assert.Equal(t, "https://*.Example.com:5000/team", p.String())
	assert.False(t, keyring.Pattern{}.Match(keyring.Image{}), "zero pattern matches nothing")
}

func TestImageRegistry(t *testing.T) {
	tests := []struct {
		name  string
		image string
		want  string
	}{
		{name: "bare hub name", image: "alpine", want: "docker.io"},
		{name: "hub user repository", image: "myorg/app:v1", want: "docker.io"},
		{name: "hub explicit", image: "docker.io/library/alpine", want: "docker.io"},
		{name: "hub index alias", image: "index.docker.io/library/alpine", want: "docker.io"},
		{name: "hub registry-1 alias", image: "registry-1.docker.io/library/alpine", want: "docker.io"},
		{name: "hub mixed case", image: "Docker.IO/library/alpine", want: "docker.io"},
		{name: "registry", image: "registry.example/team/app:v1", want: "registry.example"},
		{name: "registry with port", image: "registry.example:5000/app", want: "registry.example:5000"},
		{name: "upper-case host folded", image: "Registry.Example:5000/app", want: "registry.example:5000"},
		{name: "localhost", image: "localhost/app", want: "localhost"},
		{name: "localhost with port", image: "localhost:5000/app", want: "localhost:5000"},
		{name: "ip with port", image: "127.0.0.1:5000/app@sha256:" + sha, want: "127.0.0.1:5000"},
		{name: "ipv6 with port", image: "[::1]:5000/app", want: "[::1]:5000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keyring.ImageRegistry(tt.image)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestImageRegistryErrors(t *testing.T) {
	for _, image := range []string{
		"",
		"https://registry.example/app",
		"registry.example/App",
		"registry.example/app:",
		"registry.example:port/app",
		"*.example/app",
		"registry.example/app@sha256:short",
		"registry.example/team//app",
		"registry.example/team/",
	} {
		t.Run(image, func(t *testing.T) {
			_, err := keyring.ImageRegistry(image)
			assert.ErrorIs(t, err, keyring.ErrInvalidImage)
		})
	}
}

func TestParseImage(t *testing.T) {
	tests := []struct {
		name           string
		image          string
		wantRegistry   string
		wantRepository string
		wantHost       string
		wantPort       string
	}{
		{name: "bare name", image: "alpine", wantRegistry: "docker.io", wantRepository: "library/alpine", wantHost: "docker.io"},
		{name: "alias bare name", image: "registry-1.docker.io/alpine", wantRegistry: "docker.io", wantRepository: "library/alpine", wantHost: "docker.io"},
		{name: "hub user", image: "myorg/app", wantRegistry: "docker.io", wantRepository: "myorg/app", wantHost: "docker.io"},
		{name: "nested", image: "Reg.Example:5000/a/b/c:v1", wantRegistry: "reg.example:5000", wantRepository: "a/b/c", wantHost: "reg.example", wantPort: "5000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			im, err := keyring.ParseImage(tt.image)
			require.NoError(t, err)
			assert.Equal(t, tt.wantRegistry, im.Registry)
			assert.Equal(t, tt.wantRepository, im.Repository)
			assert.Equal(t, tt.wantHost, im.Host())
			assert.Equal(t, tt.wantPort, im.Port())
			assert.Equal(t, tt.wantRegistry+"/"+tt.wantRepository, im.String())
		})
	}
}

func TestPatternMoreSpecific(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{a: "registry.example", b: "*.example", want: true},
		{a: "*.example", b: "registry.example", want: false},
		{a: "registry.example/team/app", b: "registry.example/team", want: true},
		{a: "app*.example", b: "*.example", want: true},
		{a: "registry.example", b: "registry.example", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.a+" vs "+tt.b, func(t *testing.T) {
			a, err := keyring.ParsePattern(tt.a)
			require.NoError(t, err)
			b, err := keyring.ParsePattern(tt.b)
			require.NoError(t, err)
			assert.Equal(t, tt.want, a.MoreSpecific(b))
		})
	}
}
