package credtracker

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidImageName is returned for an image reference that cannot be
// parsed into a repository name.
var ErrInvalidImageName = errors.New("invalid image name")

const (
	dockerHub       = "docker.io"
	dockerHubLegacy = "index.docker.io"
	officialPrefix  = "library/"
)

// RepositoryName returns the normalized repository name of an image
// reference: the registry host in lower case (docker.io for Docker Hub),
// then the path ("library/" added for Docker Hub's official images),
// without tag or digest. "alpine:3.19", "docker.io/library/alpine" and
// "index.docker.io/library/alpine@sha256:..." all give
// "docker.io/library/alpine".
//
// It runs on the decision's hot path, so it uses no regular expression and
// allocates only when the name must be rewritten (a default registry or
// namespace added, a host lower-cased). For every reference that
// go-containerregistry's name.ParseReference accepts, it returns the same
// repository (see FuzzRepositoryName).
//
// pkg/keyring parses image references too, into host, port and path with
// stricter checks and a go-containerregistry fallback. Deriving this key
// from keyring.ParseImage instead was measured: 65-93 ns and two
// allocations for "alpine:3.19" instead of about 40 ns and one, and about
// 30 ns more per decision at 100 000 records, past the hot path's budget;
// so the tracker keeps this single-purpose parser.
func RepositoryName(image string) (string, error) {
	repo, _, err := splitImage(image)
	return repo, err
}

// normalizedImage returns the repository name with the reference's tag or
// digest ("docker.io/library/alpine:3.19"), the key of a pull intent, and
// the repository name alone.
func normalizedImage(image string) (key, repo string, err error) {
	repo, suffix, err := splitImage(image)
	if err != nil {
		return "", "", err
	}
	return repo + suffix, repo, nil
}

// splitImage splits an image reference into its normalized repository name
// and its suffix (":tag", "@digest", or "" when neither is given; when both
// are given the digest wins, as it is what the runtime pulls).
func splitImage(image string) (repo, suffix string, err error) {
	name := image
	if i := strings.IndexByte(name, '@'); i >= 0 {
		suffix = name[i:]
		if !validDigest(suffix[1:]) {
			return "", "", fmt.Errorf("%w %q: malformed digest", ErrInvalidImageName, image)
		}
		name = name[:i]
	}
	slash := strings.LastIndexByte(name, '/')
	if i := strings.LastIndexByte(name, ':'); i > slash {
		tag := name[i+1:]
		if !validTag(tag) {
			return "", "", fmt.Errorf("%w %q: malformed tag", ErrInvalidImageName, image)
		}
		if suffix == "" {
			suffix = name[i:]
		}
		name = name[:i]
	}

	host, path := "", name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		if first := name[:i]; first == "localhost" || strings.ContainsAny(first, ".:") {
			host, path = first, name[i+1:]
		}
	}
	if !validPath(path) {
		return "", "", fmt.Errorf("%w %q: malformed repository path", ErrInvalidImageName, image)
	}
	if host != "" && !validHost(host) {
		return "", "", fmt.Errorf("%w %q: malformed registry host", ErrInvalidImageName, image)
	}

	hub := host == ""
	if !hub && (strings.EqualFold(host, dockerHub) || strings.EqualFold(host, dockerHubLegacy)) {
		hub = true
	}
	switch {
	case hub && strings.IndexByte(path, '/') < 0:
		return dockerHub + "/" + officialPrefix + path, suffix, nil
	case hub:
		if host == dockerHub {
			return name, suffix, nil
		}
		return dockerHub + "/" + path, suffix, nil
	case hasUpper(host):
		return strings.ToLower(host) + "/" + path, suffix, nil
	default:
		return name, suffix, nil
	}
}

// validPath accepts what go-containerregistry accepts for a repository:
// 1 to 255 characters of [a-z0-9_./-].
func validPath(p string) bool {
	if len(p) == 0 || len(p) > 255 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/') {
			return false
		}
	}
	return true
}

// validTag accepts 1 to 128 characters of [A-Za-z0-9_.-].
func validTag(t string) bool {
	if len(t) == 0 || len(t) > 128 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// validDigest accepts "algorithm:encoded" as the OCI image spec defines
// it, with the lengths it requires for sha256 and sha512.
func validDigest(d string) bool {
	i := strings.IndexByte(d, ':')
	if i <= 0 || i == len(d)-1 {
		return false
	}
	alg, enc := d[:i], d[i+1:]
	for j := 0; j < len(alg); j++ {
		c := alg[j]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || (j > 0 && (c == '+' || c == '.' || c == '_' || c == '-'))) {
			return false
		}
	}
	switch alg {
	case "sha256":
		if len(enc) != 64 {
			return false
		}
	case "sha512":
		if len(enc) != 128 {
			return false
		}
	}
	for j := 0; j < len(enc); j++ {
		c := enc[j]
		if !('a' <= c && c <= 'f' || '0' <= c && c <= '9' || (alg != "sha256" && alg != "sha512" && ('A' <= c && c <= 'Z' || 'g' <= c && c <= 'z' || c == '=' || c == '_' || c == '-'))) {
			return false
		}
	}
	return true
}

// validHost accepts a host name or IP address with an optional port, the
// characters an RFC 3986 authority may hold here.
func validHost(h string) bool {
	if len(h) == 0 || len(h) > 255 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_') {
			return false
		}
	}
	return true
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}
