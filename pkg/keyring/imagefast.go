package keyring

import (
	"strings"

	"github.com/pullguard/pullguard/pkg/credential"
)

// parseImageFast parses the common shapes of image reference without
// allocating: [host[:port]/]path[:tag][@sha256:hex] with a lower-case host
// of letters, digits, dots and dashes. It reports ok only when the
// reference is certainly valid and its result equals what the
// go-containerregistry parse in ParseImage gives (a fuzz test checks
// this); anything unusual (upper case, IPv6, other digest algorithms,
// odd characters) is left to that parse.
func parseImageFast(image string) (Image, bool) {
	s := image
	if i := strings.IndexByte(s, '@'); i >= 0 {
		if !isSHA256Digest(s[i+1:]) {
			return Image{}, false
		}
		s = s[:i]
	}
	// A tag is a ':' after the last '/'.
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		if !isTag(s[i+1:]) {
			return Image{}, false
		}
		s = s[:i]
	}
	registry, path := "", s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		first := s[:i]
		if first == "localhost" || strings.ContainsAny(first, ".:") {
			registry, path = first, s[i+1:]
		}
	}
	if !isRepositoryPath(path) {
		return Image{}, false
	}
	if registry == "" {
		registry = dockerHub
	}
	host, port, ok := splitSimpleHostPort(registry)
	if !ok {
		return Image{}, false
	}
	registry = credential.NormalizeRegistry(registry) // no allocation: already lower case
	if registry == dockerHub {
		host = dockerHub // any alias
		if strings.IndexByte(path, '/') < 0 {
			path = "library/" + path
		}
	}
	return Image{Registry: registry, Repository: path, host: host, port: port}, true
}

// splitSimpleHostPort accepts only lower-case DNS-style hosts (non-empty
// labels of [a-z0-9-]) with an optional numeric port.
func splitSimpleHostPort(s string) (host, port string, ok bool) {
	host = s
	if i := strings.IndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
		if !validPort(port) {
			return "", "", false
		}
	}
	labelLen := 0
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case c == '.':
			if labelLen == 0 {
				return "", "", false
			}
			labelLen = 0
			continue
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		default:
			return "", "", false
		}
		labelLen++
	}
	return host, port, labelLen > 0
}

// isRepositoryPath accepts 1 to 255 bytes of [a-z0-9_.-] in non-empty
// '/'-separated segments.
func isRepositoryPath(p string) bool {
	if p == "" || len(p) > 255 || p[0] == '/' || p[len(p)-1] == '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		case c == '/':
			if p[i-1] == '/' {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// isTag accepts 1 to 128 bytes of [A-Za-z0-9_.-].
func isTag(t string) bool {
	if t == "" || len(t) > 128 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// isSHA256Digest accepts "sha256:" and 64 lower-case hex digits.
func isSHA256Digest(d string) bool {
	const prefix = "sha256:"
	if len(d) != len(prefix)+64 || d[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(d); i++ {
		if !isHex(d[i]) {
			return false
		}
	}
	return true
}
