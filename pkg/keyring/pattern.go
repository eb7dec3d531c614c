package keyring

import (
	"fmt"
	"strings"

	"github.com/pullguard/pullguard/pkg/credential"
)

// Pattern is a compiled image pattern: a docker config key or a credential
// provider's matchImages entry, such as "*.azurecr.io",
// "registry.example:5000/team" or "https://index.docker.io/v1/".
//
// A pattern matches an image when all of these hold:
//   - the pattern's host has as many dot-separated labels as the image's
//     registry host and each label matches; in a pattern label '*' stands
//     for any run of characters inside that one label, so "*.k8s.io",
//     "k8s.*.io", "k8s.*" and "app*.k8s.io" are valid and "*.io" does not
//     match "a.b.io". Hosts compare case-insensitively;
//   - the ports are equal: a pattern with a port matches only that port,
//     and a pattern without one matches only images that name no port (as
//     the kubelet does);
//   - the pattern's path, if any, is a prefix of the image's repository
//     on whole segments: "reg.example/team" matches "reg.example/team" and
//     "reg.example/team/app" but not "reg.example/teammate". A path written
//     with a trailing '/' ("reg.example/team/") matches only repositories
//     under it ("reg.example/team/app", not "reg.example/team"), as the
//     kubelet's path-prefix rule does.
//
// Docker Hub is spelled "docker.io" whichever alias the pattern uses
// ("index.docker.io", "registry-1.docker.io"), and images without a
// registry are Docker Hub images ("alpine" is "docker.io/library/alpine").
// The zero Pattern matches nothing.
type Pattern struct {
	raw    string
	host   string // lower case, may hold '*'
	port   string
	path   string // no leading or trailing '/'
	dir    bool   // the path was written with a trailing '/': only repositories under it match
	labels int    // number of host labels

	wildcard bool // host holds a '*'
	segments int  // number of path segments
	literal  int  // host bytes that are not '*'
}

// ParsePattern compiles an image pattern. An "http://" or "https://"
// prefix is ignored. It fails for an empty pattern, a malformed host or
// port, and for patterns that could never match an image: a wildcard in
// the port or path, an empty path segment, or a path character that image
// repositories cannot hold.
func ParsePattern(pattern string) (Pattern, error) {
	p, err := parsePattern(pattern, false)
	if err != nil {
		return Pattern{}, &PatternError{Pattern: pattern, Err: err}
	}
	return p, nil
}

// MatchImage reports whether the image reference matches the pattern, with
// the rules documented on Pattern. An invalid pattern or image matches
// nothing; CheckMatch tells them apart.
func MatchImage(pattern, image string) bool {
	p, err := ParsePattern(pattern)
	if err != nil {
		return false
	}
	im, err := ParseImage(image)
	if err != nil {
		return false
	}
	return p.Match(im)
}

// CheckMatch is MatchImage that tells an invalid pattern or image (an
// error wrapping ErrInvalidImage, or a *PatternError) from no match
// (false, nil).
func CheckMatch(pattern, image string) (bool, error) {
	p, err := ParsePattern(pattern)
	if err != nil {
		return false, err
	}
	im, err := ParseImage(image)
	if err != nil {
		return false, err
	}
	return p.Match(im), nil
}

// String returns the pattern as it was given.
func (p Pattern) String() string { return p.raw }

// Match reports whether the parsed image matches the pattern.
func (p Pattern) Match(im Image) bool {
	if p.labels == 0 || p.port != im.port {
		return false
	}
	if !p.matchHost(im.host) {
		return false
	}
	if p.path == "" {
		return true
	}
	repo := im.Repository
	if !strings.HasPrefix(repo, p.path) {
		return false
	}
	if len(repo) == len(p.path) {
		return !p.dir
	}
	return repo[len(p.path)] == '/'
}

// matchHost matches host label by label without allocating.
func (p Pattern) matchHost(host string) bool {
	if !p.wildcard {
		return host == p.host
	}
	pat := p.host
	for {
		pi := strings.IndexByte(pat, '.')
		hi := strings.IndexByte(host, '.')
		if (pi < 0) != (hi < 0) {
			return false // label counts differ
		}
		if pi < 0 {
			return matchLabel(pat, host)
		}
		if !matchLabel(pat[:pi], host[:hi]) {
			return false
		}
		pat, host = pat[pi+1:], host[hi+1:]
	}
}

// matchLabel matches one host label against a label pattern in which '*'
// stands for any run of characters (possibly empty).
func matchLabel(pat, s string) bool {
	// Classic linear wildcard matching with one backtrack point.
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(pat) && pat[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(pat) && pat[pi] == s[si]:
			pi++
			si++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(pat) && pat[pi] == '*' {
		pi++
	}
	return pi == len(pat)
}

// moreSpecific orders two patterns that both match one image: an exact
// host before a wildcard host, then more path segments first, then more
// literal (non-'*') host characters first. It returns false for ties.
// MoreSpecific reports whether p ranks before q in candidate order: an
// exact host before a wildcard host, then more path segments, then more
// literal host characters. Patterns that rank equal keep their source
// order; every keyring, and credential provider responses, order by it.
func (p Pattern) MoreSpecific(q Pattern) bool { return moreSpecific(&p, &q) }

func moreSpecific(a, b *Pattern) bool {
	if a.wildcard != b.wildcard {
		return !a.wildcard
	}
	if a.segments != b.segments {
		return a.segments > b.segments
	}
	return a.literal > b.literal
}

// parsePattern does the work of ParsePattern. For a docker config key
// (configKey true) a leading "/v1/" or "/v2/" path segment is dropped, as
// the docker CLI and the kubelet treat "https://index.docker.io/v1/" as
// the host alone.
func parsePattern(raw string, configKey bool) (Pattern, error) {
	s := raw
	for _, scheme := range [...]string{"https://", "http://"} {
		if len(s) >= len(scheme) && strings.EqualFold(s[:len(scheme)], scheme) {
			s = s[len(scheme):]
			break
		}
	}
	hostport, path, _ := strings.Cut(s, "/")
	if hostport == "" {
		return Pattern{}, fmt.Errorf("empty host")
	}
	if configKey && (strings.HasPrefix(path, "v1/") || strings.HasPrefix(path, "v2/")) {
		path = path[len("v1/"):]
	}
	dir := false
	if strings.HasSuffix(path, "/") {
		path, dir = path[:len(path)-1], path != "/"
	}
	hostport = credential.NormalizeRegistry(hostport)
	host, port, err := splitHostPort(hostport)
	if err != nil {
		return Pattern{}, err
	}
	if err := checkHost(host, true); err != nil {
		return Pattern{}, err
	}
	segments, err := checkPatternPath(path)
	if err != nil {
		return Pattern{}, err
	}
	return Pattern{
		raw:      raw,
		host:     host,
		port:     port,
		path:     path,
		dir:      dir,
		labels:   strings.Count(host, ".") + 1,
		wildcard: strings.Contains(host, "*"),
		segments: segments,
		literal:  len(host) - strings.Count(host, "*"),
	}, nil
}

// checkPatternPath validates a pattern path (no leading or trailing '/')
// and returns its number of segments.
func checkPatternPath(path string) (int, error) {
	if path == "" {
		return 0, nil
	}
	segments := 1
	prev := byte('/')
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '/':
			if prev == '/' {
				return 0, fmt.Errorf("empty path segment")
			}
			segments++
		case c == '*':
			return 0, fmt.Errorf("wildcards are not supported in the path")
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return 0, fmt.Errorf("invalid character %q in path", c)
		}
		prev = c
	}
	return segments, nil
}
