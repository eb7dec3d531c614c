package keyring

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
)

// Pattern is a compiled image glob: a credential provider's matchImages
// entry, or the key a docker config entry is filed under (ConfigKey). It
// is read as the kubelet's URLsMatchStr(glob, image) reads it
// (k8s.io/kubernetes pkg/credentialprovider): "https://" is put in front
// of the glob and the result parsed with net/url; the host is split from
// its port with net.SplitHostPort (a host without a port keeps it all) and
// into labels at every '.'.
//
// A pattern matches an image when all of these hold, compared with the
// image's normalized name (Image.Name, "docker.io/library/alpine" for
// "alpine") read the same way:
//   - the ports are equal: a pattern without a port matches only images
//     that name none;
//   - the hosts have as many labels;
//   - the pattern's URL path is a plain string prefix of the image's
//     ("/team" is a prefix of "/teammate/app", and "/team/" is not one of
//     "/team");
//   - each host label matches as a path/filepath.Match pattern: '*' and
//     '?' within the label, '[...]' classes, '\\' escapes, all
//     case-sensitive; a malformed label matches nothing.
//
// Nothing else is folded: not the case of a host, not Docker Hub's
// aliases. Images on Docker Hub are named "docker.io/..." (an
// "index.docker.io/..." image is renamed so); the keyrings add the
// kubelet's one Docker Hub rule, the fallback to the key
// "index.docker.io" (see the package documentation).
//
// The zero Pattern matches nothing.
type Pattern struct {
	raw    string
	labels []string // host labels: filepath.Match patterns
	// literal has bit i set when labels[i] holds no glob syntax, so
	// that == is filepath.Match's answer (labels past 64 use Match).
	literal uint64
	port    string
	path    string // the URL path: "" or starting with '/'
	valid   bool
}

// ParsePattern compiles an image glob as the kubelet reads a matchImages
// entry. It fails only where the kubelet's own check of a matchImages
// entry fails (net/url cannot parse "https://"+glob), with a
// *PatternError. A pattern can be valid and never match ("reg.example/*":
// a path is compared literally, and no repository holds a '*').
func ParsePattern(glob string) (Pattern, error) {
	u, err := url.Parse("https://" + glob)
	if err != nil {
		return Pattern{}, &PatternError{Pattern: glob, Err: urlReason(err)}
	}
	return compile(glob, u), nil
}

// ConfigKey returns the key under which the kubelet's
// BasicDockerKeyring.Add files a docker config entry (or a credential
// provider's auth entry) written as raw: "https://" is put in front
// unless raw starts with "https://" or "http://" (as written, case
// included), the result is parsed with net/url, a leading "/v1/" or "/v2/"
// of its path is dropped, and the key is the host followed by the path,
// unless the path is empty or "/". So "https://index.docker.io/v1/" is
// "index.docker.io", "reg.example/v2/team" is "reg.example/team" and
// "reg.example/team/" stays so. An entry whose key does not parse is
// skipped by the kubelet; ConfigKey returns a *PatternError for it.
func ConfigKey(raw string) (string, error) {
	value := raw
	if !strings.HasPrefix(value, "https://") && !strings.HasPrefix(value, "http://") {
		value = "https://" + value
	}
	u, err := url.Parse(value)
	if err != nil {
		return "", &PatternError{Pattern: raw, Err: urlReason(err)}
	}
	path := u.Path
	if strings.HasPrefix(path, "/v2/") || strings.HasPrefix(path, "/v1/") {
		path = path[len("/v2"):]
	}
	if path == "" || path == "/" {
		return u.Host, nil
	}
	return u.Host + path, nil
}

// urlReason is the reason of a net/url error without the URL it quotes
// (the pattern is quoted once, by PatternError).
func urlReason(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// compile splits a parsed glob as the kubelet's SplitURL does.
func compile(raw string, u *url.URL) Pattern {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	p := Pattern{raw: raw, labels: strings.Split(host, "."), port: port, path: u.Path, valid: true}
	for i, l := range p.labels {
		if i < 64 && !strings.ContainsAny(l, `*?[\`) {
			p.literal |= 1 << i
		}
	}
	return p
}

// Unmatchable returns why no image can match the pattern, or "" when some
// image may: its path (compared as a plain string prefix of "/" and the
// image's repository) holds "//" or a byte no repository holds (a '*', an
// upper-case letter, a '?' or '#' that net/url did not take). "//" is what
// a scheme becomes in a glob ("https://reg.example": host "https:", path
// "//reg.example"). The kubelet loads such a pattern and never matches it;
// callers report it.
func (p Pattern) Unmatchable() string {
	if !p.valid {
		return "it is not a valid image pattern"
	}
	if strings.Contains(p.path, "//") {
		return fmt.Sprintf("its path %q holds \"//\", which no image's path does (as a scheme written before the host gives)", p.path)
	}
	for i := 0; i < len(p.path); i++ {
		switch c := p.path[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '/', c == '.', c == '_', c == '-':
		default:
			return fmt.Sprintf("its path %q holds %q, which no repository holds (the path is compared as a plain prefix, with no wildcard)", p.path, c)
		}
	}
	return ""
}

// MatchImage reports whether the image reference matches the glob, with
// the rules documented on Pattern. An invalid pattern or image matches
// nothing; CheckMatch tells them apart.
func MatchImage(pattern, image string) bool {
	ok, _ := CheckMatch(pattern, image)
	return ok
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

// Match reports whether the parsed image matches the pattern. It does not
// allocate.
func (p Pattern) Match(im Image) bool {
	if !p.valid || p.port != im.port || len(p.labels) != im.labels {
		return false
	}
	// The image's URL path is "/" + its repository.
	if p.path != "" && (p.path[0] != '/' || !strings.HasPrefix(im.Repository, p.path[1:])) {
		return false
	}
	host := im.host
	for i, pl := range p.labels {
		label, rest, _ := strings.Cut(host, ".")
		host = rest
		if p.literal&(1<<i) != 0 { // 0 for i >= 64
			if pl != label {
				return false
			}
			continue
		}
		if ok, _ := filepath.Match(pl, label); !ok {
			return false
		}
	}
	return true
}
