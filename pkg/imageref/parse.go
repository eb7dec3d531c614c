package imageref

import (
	_ "crypto/sha256" // sha256 digests are supported, as in the kubelet
	_ "crypto/sha512" // so are sha384 and sha512
	"strings"
)

const (
	// DefaultDomain is Docker Hub's normalized domain.
	DefaultDomain  = "docker.io"
	legacyDomain   = "index.docker.io"
	officialPrefix = "library/"
	localhost      = "localhost"
	defaultTag     = "latest"
	// maxPathLength is distribution/reference's RepositoryNameTotalLengthMax.
	maxPathLength = 255
)

// Reference is a parsed image reference. Its strings are slices of the
// parsed text whenever normalization did not have to rewrite it.
type Reference struct {
	// Name is the normalized repository name, reference.Named.Name():
	// "alpine" gives "docker.io/library/alpine". Only Docker Hub is
	// rewritten (index.docker.io becomes docker.io, "library/" is added
	// to a one-component path); a registry host keeps its case.
	Name string
	// Domain is reference.Domain(named): the registry host and port. It
	// is "" in distribution's corner case where the first component is
	// not a valid host but the whole name is a valid path
	// ("a_b.example/app"); Registry then gives what a runtime contacts.
	Domain string
	// Path is reference.Path(named): Name without Domain.
	Path string
	// Tag is the tag without ':' ("" when none).
	Tag string
	// Digest is the digest without '@' ("" when none).
	Digest string
}

// Registry returns the part of Name before its first '/': the registry a
// runtime contacts for the image.
func (r Reference) Registry() string {
	i := strings.IndexByte(r.Name, '/')
	if i < 0 {
		return ""
	}
	return r.Name[:i]
}

// Repository returns the part of Name after its first '/'.
func (r Reference) Repository() string {
	return r.Name[strings.IndexByte(r.Name, '/')+1:]
}

// String returns the reference as distribution/reference prints it:
// Name, then ":"+Tag and "@"+Digest when present.
func (r Reference) String() string {
	s := r.Name
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// DockerRef returns what reference.ParseDockerRef gives, the name
// containerd stores an image under: Name@Digest when there is a digest
// (the tag is dropped), else Name:Tag, with "latest" when there is none.
func (r Reference) DockerRef() string {
	switch {
	case r.Digest != "":
		return r.Name + "@" + r.Digest
	case r.Tag != "":
		return r.Name + ":" + r.Tag
	default:
		return r.Name + ":" + defaultTag
	}
}

// Parse parses an image reference as reference.ParseNormalizedNamed does,
// the call the kubelet makes before every image operation. On failure the
// error is an *Error, errors.Is(err, ErrInvalid) holds, and its reason is
// distribution/reference's.
//
// It allocates nothing for a name that needs no rewriting (a registry host
// and a path with at least one '/', such as "registry.example/team/app:v1").
func Parse(s string) (Reference, error) {
	var r Reference
	if parseFast(s, &r) {
		return r, nil
	}
	r, c, remote := parse(s)
	if c != ok {
		return Reference{}, newError(s, c, remote)
	}
	return r, nil
}

// Name is the normalized repository name of s, Parse(s).Name, with
// Parse's error. It is what the decision path needs of a name, without
// copying the rest of a Reference.
func Name(s string) (string, error) {
	var r Reference
	if parseFast(s, &r) {
		return r.Name, nil
	}
	r, err := Parse(s)
	return r.Name, err
}

// Valid reports whether Parse accepts s.
func Valid(s string) bool {
	var r Reference
	if parseFast(s, &r) {
		return true
	}
	_, c, _ := parse(s)
	return c == ok
}

func parse(s string) (r Reference, c code, remote string) {
	if isHexID(s) {
		return r, hexName, ""
	}
	// The domain, as distribution's splitDockerDomain picks it: the first
	// component when it is "localhost", holds a '.' or ':', or has an
	// upper-case letter; Docker Hub otherwise.
	domain, body := DefaultDomain, s
	first, rest, found := cut(s, '/')
	inPlace := false // domain+"/"+body is s itself
	if found {
		switch {
		case first == legacyDomain:
			body = rest
		case first == localhost, hasDotOrColon(first), notLower(first):
			domain, body, inPlace = first, rest, true
		}
	}
	prefix := ""
	if domain == DefaultDomain && strings.IndexByte(body, '/') < 0 {
		prefix = officialPrefix
	}
	rem := body
	if i := strings.IndexByte(rem, ':'); i >= 0 {
		rem = rem[:i]
	}
	if notLower(rem) {
		return r, upperRemote, prefix + rem
	}

	// The reference pattern, on domain + "/" + prefix + body.
	name, tag, dig, hasTag, hasDig := splitSuffix(body)
	domainOK, matched := match(domain, name, tag, dig, hasTag, hasDig)
	if !matched {
		// distribution tells upper case from other errors by matching
		// the lower-cased text again; this path may allocate.
		lower := strings.ToLower(domain + "/" + prefix + body)
		d, rest, _ := cut(lower, '/')
		n, t, dg, ht, hd := splitSuffix(rest)
		if _, folded := match(d, n, t, dg, ht, hd); folded {
			return r, upperCase, ""
		}
		return r, badFormat, ""
	}
	pathLen := len(prefix) + len(name)
	if !domainOK {
		pathLen += len(domain) + 1
	}
	if pathLen > maxPathLength {
		return r, tooLong, ""
	}
	if hasDig {
		if c := checkDigest(dig); c != ok {
			return r, c, ""
		}
	}

	if inPlace && prefix == "" {
		r.Name = s[:len(domain)+1+len(name)]
	} else {
		r.Name = domain + "/" + prefix + name
	}
	if domainOK {
		r.Domain, r.Path = domain, r.Name[len(domain)+1:]
	} else {
		r.Path = r.Name
	}
	r.Tag, r.Digest = tag, dig
	return r, ok, ""
}

// splitSuffix splits "name[:tag][@digest]" where a name holds neither ':'
// nor '@'.
func splitSuffix(body string) (name, tag, dig string, hasTag, hasDig bool) {
	name = body
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name, dig, hasDig = name[:i], name[i+1:], true
	}
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name, tag, hasTag = name[:i], name[i+1:], true
	}
	return name, tag, dig, hasTag, hasDig
}

// match reports whether domain/name[:tag][@dig] matches the reference
// pattern, and whether domain matched as a host (otherwise it matched as
// the first path component).
func match(domain, name, tag, dig string, hasTag, hasDig bool) (domainOK, matched bool) {
	if hasTag && !validTag(tag) {
		return false, false
	}
	if hasDig && !validDigestPattern(dig) {
		return false, false
	}
	if !validRemote(name) {
		return false, false
	}
	if validDomain(domain) {
		return true, true
	}
	return false, validComponent(domain)
}

// cut is strings.Cut for one byte.
func cut(s string, sep byte) (before, after string, found bool) {
	if i := strings.IndexByte(s, sep); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

func hasDotOrColon(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' || s[i] == ':' {
			return true
		}
	}
	return false
}

// notLower reports strings.ToLower(s) != s, without allocating for ASCII.
func notLower(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return strings.ToLower(s) != s
		}
	}
	return hasUpper(s)
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// isHexID reports a 64-character lower-case hexadecimal string.
func isHexID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLowerHex(s[i]) {
			return false
		}
	}
	return true
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }
func isDigit(c byte) bool    { return '0' <= c && c <= '9' }
func isLetter(c byte) bool   { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isAlnum(c byte) bool    { return isLetter(c) || isDigit(c) }
