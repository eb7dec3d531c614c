package imageref

import "strings"

// parseFast is the decision path's parser: one pass over the common shapes
// (a host, a lower-case path, a tag, a sha256 digest). It reports ok only
// when parse would accept s with the same result; anything else (upper
// case, other digests, IPv6 hosts, every error) is left to parse, which
// follows distribution/reference step by step. FuzzDifferential checks
// both, as Parse calls this first.
//
// It fills *r only when it reports ok (r is written in place: the
// decision path calls it for every decision, and a Reference is ten
// words).
func parseFast(s string, r *Reference) bool {
	if len(s) == 64 {
		return false // could be a hexadecimal image ID
	}
	domain, body := DefaultDomain, s
	inPlace := false
	if i := strings.IndexByte(s, '/'); i >= 0 {
		first := s[:i]
		switch {
		case first == legacyDomain:
			body = s[i+1:]
		case first == localhost || hasDotOrColon(first):
			if !fastDomain(first) {
				return false
			}
			domain, body, inPlace = first, s[i+1:], true
		}
	}
	end, slash, ok := scanName(body)
	if !ok {
		return false
	}
	name, rest := body[:end], body[end:]
	var tag, dig string
	if rest != "" && rest[0] == ':' {
		j := 1
		for j < len(rest) && rest[j] != '@' {
			j++
		}
		tag, rest = rest[1:j], rest[j:]
		if !validTag(tag) {
			return false
		}
	}
	if rest != "" {
		dig = rest[1:] // rest[0] is '@'
		if !isSHA256(dig) {
			return false
		}
	}
	prefix := ""
	if domain == DefaultDomain && !slash {
		prefix = officialPrefix
	}
	if len(prefix)+len(name) > maxPathLength {
		return false
	}
	if inPlace && prefix == "" {
		r.Name = s[:len(domain)+1+len(name)]
	} else {
		r.Name = domain + "/" + prefix + name
	}
	r.Domain, r.Path = domain, r.Name[len(domain)+1:]
	r.Tag, r.Digest = tag, dig
	return true
}

// fastDomain accepts a lower-case domain name with an optional port:
// labels of [a-z0-9-] that start and end with a letter or digit.
func fastDomain(d string) bool {
	labelStart, prev := true, byte(0)
	for i := 0; i < len(d); i++ {
		c := d[i]
		switch {
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
			labelStart = false
		case c == '-' && !labelStart:
		case c == '.' && !labelStart && prev != '-':
			labelStart = true
		case c == ':' && !labelStart && prev != '-':
			if i == len(d)-1 {
				return false
			}
			for j := i + 1; j < len(d); j++ {
				if !isDigit(d[j]) {
					return false
				}
			}
			return true
		default:
			return false
		}
		prev = c
	}
	return !labelStart && prev != '-'
}

// scanName scans a remote name at the start of body up to ':' or '@' or
// its end, and reports where it ends, whether it holds a '/', and whether
// it is valid: path components of [a-z0-9] runs joined by ".", "_", "__"
// or dashes, separated by '/'.
func scanName(body string) (end int, slash, ok bool) {
	compStart := true // expecting the first character of a component
	var sep byte      // the separator run in progress, 0 when none
	sepLen := 0
	for end = 0; end < len(body); end++ {
		c := body[end]
		switch {
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
			compStart, sep, sepLen = false, 0, 0
		case c == '/':
			if compStart || sep != 0 {
				return end, slash, false
			}
			compStart, slash = true, true
		case c == '.' || c == '_' || c == '-':
			if compStart || sep != 0 && sep != c {
				return end, slash, false
			}
			sep = c
			sepLen++
			if c == '.' && sepLen > 1 || c == '_' && sepLen > 2 {
				return end, slash, false
			}
		case c == ':' || c == '@':
			return end, slash, !compStart && sep == 0
		default:
			return end, slash, false
		}
	}
	return end, slash, !compStart && sep == 0
}

// isSHA256 accepts "sha256:" and 64 lower-case hexadecimal digits.
func isSHA256(d string) bool {
	const prefix = "sha256:"
	if len(d) != len(prefix)+64 || d[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(d); i++ {
		if !isLowerHex(d[i]) {
			return false
		}
	}
	return true
}
