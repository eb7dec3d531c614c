package keyring_test

import (
	"strconv"
	"strings"
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
		{name: "ip glob labels", pattern: "10.*.*.*:5000", image: "10.1.2.3:5000/app", want: true},
		{name: "ipv6 literal with port", pattern: "[::1]:5000", image: "[::1]:5000/app", want: true},
		// Without a port, net.SplitHostPort keeps "[::1]" whole, and as a
		// glob "[::1]" is a class of one character.
		{name: "ipv6 literal without port never matches", pattern: "[::1]", image: "[::1]/app", want: false},
		{name: "empty port is no port", pattern: "registry.example:", image: "registry.example/app", want: true},
		// distribution/reference takes any hex digits and colons between
		// brackets; net/url wants an IP address there, and where it
		// fails the kubelet matches no key at all.
		{name: "not an IP address in brackets", pattern: "*", image: "[A]/app", want: false},
		{name: "not an IP address in brackets, with a port", pattern: "*:5000", image: "[ab]:5000/app", want: false},

		// Path rules: a plain string prefix of the URL path.
		{name: "path equal to repository", pattern: "registry.example/team/app", image: "registry.example/team/app:v1", want: true},
		{name: "path prefix is a string prefix", pattern: "registry.example/team", image: "registry.example/teammate/app", want: true},
		{name: "longer path than image", pattern: "registry.example/team/app/sub", image: "registry.example/team/app", want: false},
		{name: "trailing slash: under it", pattern: "registry.example/team/", image: "registry.example/team/app", want: true},
		{name: "trailing slash: not itself", pattern: "registry.example/team/", image: "registry.example/team", want: false},
		{name: "host pattern matches any path", pattern: "registry.example", image: "registry.example/a/b/c", want: true},
		{name: "tag and digest ignored", pattern: "registry.example/team/app", image: "registry.example/team/app:v1@sha256:" + sha, want: true},
		{name: "path compared case-sensitively", pattern: "registry.example/Team", image: "registry.example/team", want: false},
		{name: "wildcard in path is literal", pattern: "registry.example/*", image: "registry.example/app", want: false},
		{name: "v2 prefix is a path in a glob", pattern: "registry.example/v2/team", image: "registry.example/team/app", want: false},
		{name: "query dropped by net/url", pattern: "registry.example/app?x=1", image: "registry.example/app", want: true},
		{name: "user info dropped by net/url", pattern: "user@registry.example", image: "registry.example/app", want: true},

		// Case: nothing is folded.
		{name: "pattern host upper case", pattern: "Registry.EXAMPLE", image: "registry.example/app", want: false},
		{name: "image host upper case", pattern: "registry.example", image: "Registry.Example/app", want: false},
		{name: "same case", pattern: "Registry.Example", image: "Registry.Example/app", want: true},
		{name: "glob over upper case", pattern: "*.example.com", image: "REG.example.com/app", want: true},
		{name: "node key of another case", pattern: "Node.Example:5000", image: "node.example:5000/app", want: false},

		// Globs: path/filepath.Match per label, on what net/url leaves of
		// the host: a '?' starts a query, a '[' must open an IP literal
		// holding an IP address, a '\\' is refused. So '*' is the glob.
		{name: "question mark starts a query", pattern: "reg?.example", image: "reg1.example/app", want: false},
		{name: "host cut at the question mark", pattern: "localhost?x", image: "localhost/app", want: true},
		{name: "class is not an IP literal", pattern: "reg[a-c].example", image: "regb.example/app", want: false},
		{name: "glob inside an IP literal", pattern: "[a*]:5000", image: "ab:5000/app", want: false},
		{name: "escapes are refused", pattern: `\r\eg.example`, image: "reg.example/app", want: false},
		{name: "star spans no dot", pattern: "*", image: "reg.example/app", want: false},
		{name: "star on one label", pattern: "*", image: "localhost/app", want: true},
		{name: "stars", pattern: "**a*b*.*", image: "xaxxbx.io/a", want: true},

		// A scheme is not stripped from a glob: it becomes the host.
		{name: "scheme in a glob", pattern: "https://registry.example", image: "registry.example/app", want: false},

		// Docker Hub: images are named docker.io/...; no alias is folded.
		{name: "hub: bare name", pattern: "docker.io", image: "alpine", want: true},
		{name: "hub: library path", pattern: "docker.io/library", image: "alpine:3.20", want: true},
		{name: "hub: string prefix of library", pattern: "docker.io/lib", image: "alpine", want: true},
		{name: "hub: user repository", pattern: "docker.io/myorg", image: "myorg/app", want: true},
		{name: "hub: index alias in image is renamed", pattern: "docker.io", image: "index.docker.io/library/alpine", want: true},
		{name: "hub: index alias as a glob", pattern: "index.docker.io", image: "alpine", want: false},
		{name: "hub: registry-1 alias as a glob", pattern: "registry-1.docker.io", image: "docker.io/library/alpine", want: false},
		{name: "hub: registry-1 image is another registry", pattern: "docker.io", image: "registry-1.docker.io/library/alpine", want: false},
		{name: "hub: registry-1 matches itself", pattern: "registry-1.docker.io", image: "registry-1.docker.io/alpine", want: true},
		{name: "hub: not another registry", pattern: "docker.io", image: "quay.io/app", want: false},
		{name: "hub: wildcard subdomain does not match hub", pattern: "*.docker.io", image: "alpine", want: false},
		{name: "hub: library is explicit in paths", pattern: "docker.io/alpine", image: "alpine", want: false},
		{name: "hub: localhost is a registry", pattern: "docker.io", image: "localhost/app", want: false},

		// Invalid input, or a glob that cannot match, matches nothing.
		{name: "empty pattern", pattern: "", image: "registry.example/app", want: false},
		{name: "empty image", pattern: "registry.example", image: "", want: false},
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

// TestParsePatternErrors: a glob is invalid only where the kubelet's own
// check of a matchImages entry fails: net/url cannot parse it.
func TestParsePatternErrors(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
	}{
		{name: "non-numeric port", pattern: "registry.example:http"},
		{name: "glob in port", pattern: "registry.example:5*"},
		{name: "space in host", pattern: "registry example"},
		{name: "bad escape", pattern: "registry.example/%zz"},
		{name: "unterminated ipv6", pattern: "[::1:5000"},
		{name: "control character", pattern: "registry.example\x7f"},
		{name: "class in a host", pattern: "reg[a-c].example"},
		{name: "glob in an IP literal", pattern: "[a*]:5000"},
		{name: "escape in a host", pattern: `\\reg.example`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := keyring.ParsePattern(tt.pattern)
			require.Error(t, err)
			assert.ErrorIs(t, err, keyring.ErrInvalidPattern)
			var perr *keyring.PatternError
			require.ErrorAs(t, err, &perr)
			assert.Equal(t, tt.pattern, perr.Pattern)
			assert.Equal(t, 1, strings.Count(err.Error(), strconv.Quote(tt.pattern)), "the pattern is quoted once: %v", err)
		})
	}
	for _, valid := range []string{"", "https://", "/team/app", "registry.example/team/*", "registry.example:", ".example", "registry.example/Team", "registry.example/app?x=1"} {
		_, err := keyring.ParsePattern(valid)
		assert.NoError(t, err, "%q: the kubelet accepts it", valid)
	}
}

func TestParsePatternString(t *testing.T) {
	p, err := keyring.ParsePattern("https://*.Example.com:5000/team")
	require.NoError(t, err)
	assert.Equal(t, "https://*.Example.com:5000/team", p.String())
	assert.False(t, keyring.Pattern{}.Match(keyring.Image{}), "zero pattern matches nothing")
	im, err := keyring.ParseImage("alpine")
	require.NoError(t, err)
	assert.False(t, keyring.Pattern{}.Match(im), "zero pattern matches nothing")
}

// TestUnmatchable: a glob the kubelet loads but that no image can match
// says why; every other one says nothing. TestPatternAsURLsMatch's corpus
// checks that an unmatchable pattern matches none of its images.
func TestUnmatchable(t *testing.T) {
	tests := []struct {
		pattern string
		want    string // a fragment of the reason; "" when it may match
	}{
		{pattern: "registry.io/*", want: `holds '*'`},
		{pattern: "https://registry.io", want: `holds "//"`},
		{pattern: "registry.io/Team", want: `holds 'T'`},
		{pattern: "registry.io/team%3Fx", want: `holds '?'`},
		{pattern: "registry.io"},
		{pattern: "*.registry.io/team/"},
		{pattern: "registry.io/te_am.x-y"},
		{pattern: "Registry.IO"}, // an image may name its host so
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			p, err := keyring.ParsePattern(tt.pattern)
			require.NoError(t, err)
			got := p.Unmatchable()
			if tt.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Contains(t, got, tt.want)
		})
	}
	assert.NotEmpty(t, keyring.Pattern{}.Unmatchable())
}

// TestConfigKey: docker config keys are filed as the kubelet's
// BasicDockerKeyring.Add files them.
func TestConfigKey(t *testing.T) {
	tests := []struct {
		raw, want string
		wantErr   bool
	}{
		{raw: "registry.example", want: "registry.example"},
		{raw: "https://index.docker.io/v1/", want: "index.docker.io"},
		{raw: "index.docker.io/v1/", want: "index.docker.io"},
		{raw: "http://registry.example/", want: "registry.example"},
		{raw: "registry.example/v2/team", want: "registry.example/team"},
		{raw: "registry.example/v2", want: "registry.example/v2"},
		{raw: "registry.example/team/", want: "registry.example/team/"},
		{raw: "Registry.Example:5000/Team", want: "Registry.Example:5000/Team"},
		{raw: "HTTPS://registry.example", want: "HTTPS://registry.example"}, // host "HTTPS:", path "//registry.example"
		{raw: "registry.example/app?x=1#f", want: "registry.example/app"},
		{raw: "user:pw@registry.example", want: "registry.example"},
		{raw: "registry.example/te%61m", want: "registry.example/team"},
		{raw: "", want: ""},
		{raw: "registry example", wantErr: true},
		{raw: "registry.example:http", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := keyring.ConfigKey(tt.raw)
			ref, ok := refConfigKey(tt.raw)
			assert.Equal(t, ok, err == nil, "as the kubelet")
			if tt.wantErr {
				assert.ErrorIs(t, err, keyring.ErrInvalidPattern)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, ref, got)
		})
	}
}

// TestPatternAsURLsMatch compares Pattern.Match with refMatch, the
// kubelet's URLsMatchStr on the image's normalized name, on every pattern
// and image of TestMatchImage's table crossed, and on generated ones.
func TestPatternAsURLsMatch(t *testing.T) {
	globs, images := matchCorpus()
	n := 0
	for _, g := range globs {
		for _, image := range images {
			checkAgainstRef(t, g, image)
			n++
		}
	}
	t.Logf("%d pairs compared", n)
}

func checkAgainstRef(t *testing.T, glob, image string) {
	t.Helper()
	im, err := keyring.ParseImage(image)
	if err != nil {
		return
	}
	want := refMatch(glob, im.Name())
	p, err := keyring.ParsePattern(glob)
	if err != nil {
		if want {
			t.Errorf("ParsePattern(%q) failed where the kubelet matches %q: %v", glob, image, err)
		}
		return
	}
	if got := p.Match(im); got != want {
		t.Errorf("Pattern(%q).Match(%q) = %v, the kubelet's URLsMatchStr(%q, %q) = %v", glob, image, got, glob, im.Name(), want)
	}
	if got := keyring.MatchImage(glob, image); got != want {
		t.Errorf("MatchImage(%q, %q) = %v, want %v", glob, image, got, want)
	}
	if why := p.Unmatchable(); why != "" && want {
		t.Errorf("Pattern(%q) matches %q, but says %s", glob, image, why)
	}
	if dh := refDockerHub(im.Name()); im.DockerHub() != dh {
		t.Errorf("ParseImage(%q).DockerHub() = %v, the kubelet's isDefaultRegistryMatch(%q) = %v", image, im.DockerHub(), im.Name(), dh)
	}
}

// matchCorpus returns globs and images over hosts, case, ports, paths,
// globs and Docker Hub's spellings, every one combined with the others.
func matchCorpus() (globs, images []string) {
	hosts := []string{
		"registry.example", "Registry.Example", "REGISTRY.EXAMPLE", "reg.example", "a.b.example", "localhost", "LocalHost",
		"127.0.0.1", "[::1]", "docker.io", "index.docker.io", "registry-1.docker.io", "Docker.IO", "x", "a_b.example",
	}
	ports := []string{"", ":5000", ":443", ":"}
	paths := []string{"", "/", "/team", "/team/", "/teammate", "/team/app", "/library", "/library/alpine", "/v1/", "/v2/team", "/Team", "/app?x=1"}
	globHosts := append([]string{
		"*", "*.example", "*.*.example", "reg*.example", "r?g.example", "reg[a-z].example", "reg[!x].example", `\reg.example`,
		"reg[.example", `reg\`, "*.docker.io", "docker.*", "[::1", "*.Example", "", "https://registry.example", "http://x",
	}, hosts...)
	for _, h := range globHosts {
		for _, p := range ports {
			for _, path := range paths {
				globs = append(globs, h+p+path)
			}
		}
	}
	imageHosts := append([]string{"", "[ab]", "[::1::2]", "[fe80::1]"}, hosts...)
	repos := []string{"app", "team/app", "teammate/app", "team", "library/alpine", "alpine", "v2/team/app"}
	for _, h := range imageHosts {
		for _, p := range []string{"", ":5000", ":443"} {
			for _, r := range repos {
				switch {
				case h == "" && p != "":
				case h == "":
					images = append(images, r, r+":v1")
				default:
					images = append(images, h+p+"/"+r)
				}
			}
		}
	}
	return globs, images
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
		wantName       string
		wantRegistry   string
		wantRepository string
		wantHost       string
		wantPort       string
		wantDockerHub  bool
	}{
		{name: "bare name", image: "alpine", wantName: "docker.io/library/alpine", wantRegistry: "docker.io", wantRepository: "library/alpine", wantHost: "docker.io", wantDockerHub: true},
		{name: "index alias", image: "index.docker.io/alpine", wantName: "docker.io/library/alpine", wantRegistry: "docker.io", wantRepository: "library/alpine", wantHost: "docker.io", wantDockerHub: true},
		{name: "registry-1 is another registry's name", image: "registry-1.docker.io/alpine", wantName: "registry-1.docker.io/alpine", wantRegistry: "docker.io", wantRepository: "alpine", wantHost: "registry-1.docker.io"},
		{name: "hub user", image: "myorg/app", wantName: "docker.io/myorg/app", wantRegistry: "docker.io", wantRepository: "myorg/app", wantHost: "docker.io", wantDockerHub: true},
		{name: "nested, case kept", image: "Reg.Example:5000/a/b/c:v1", wantName: "Reg.Example:5000/a/b/c", wantRegistry: "reg.example:5000", wantRepository: "a/b/c", wantHost: "Reg.Example", wantPort: "5000"},
		{name: "localhost is Docker Hub's fallback", image: "localhost/app", wantName: "localhost/app", wantRegistry: "localhost", wantRepository: "app", wantHost: "localhost", wantDockerHub: true},
		{name: "localhost with a port is not", image: "localhost:5000/app", wantName: "localhost:5000/app", wantRegistry: "localhost:5000", wantRepository: "app", wantHost: "localhost", wantPort: "5000"},
		{name: "ipv6 with port", image: "[::1]:5000/app", wantName: "[::1]:5000/app", wantRegistry: "[::1]:5000", wantRepository: "app", wantHost: "::1", wantPort: "5000"},
		{name: "ipv6 without port", image: "[::1]/app", wantName: "[::1]/app", wantRegistry: "[::1]", wantRepository: "app", wantHost: "[::1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			im, err := keyring.ParseImage(tt.image)
			require.NoError(t, err)
			assert.Equal(t, tt.wantName, im.Name())
			assert.Equal(t, tt.wantName, im.Domain()+"/"+im.Repository)
			assert.Equal(t, tt.wantName, im.String())
			assert.Equal(t, tt.wantRegistry, im.Registry)
			assert.Equal(t, tt.wantRepository, im.Repository)
			assert.Equal(t, tt.wantHost, im.Host())
			assert.Equal(t, tt.wantPort, im.Port())
			assert.Equal(t, tt.wantDockerHub, im.DockerHub())
			assert.Equal(t, refDockerHub(im.Name()), im.DockerHub(), "as the kubelet's isDefaultRegistryMatch")
		})
	}
}
