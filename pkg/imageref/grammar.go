package imageref

import "strings"

// The grammar of distribution/reference, written as scanners. Each
// function names the pattern it implements.

// validDomain: host [":" port], where host is a domain name of
// dot-separated labels ([a-zA-Z0-9] or [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])
// or a bracketed IPv6 address of [a-fA-F0-9:]+, and port is [0-9]+.
func validDomain(d string) bool {
	host, port := d, ""
	hasPort := false
	if strings.HasPrefix(d, "[") {
		end := strings.IndexByte(d, ']')
		if end < 0 {
			return false
		}
		host = d[:end+1]
		switch after := d[end+1:]; {
		case after == "":
		case after[0] == ':':
			port, hasPort = after[1:], true
		default:
			return false
		}
		if !validIPv6(host) {
			return false
		}
	} else {
		if i := strings.IndexByte(d, ':'); i >= 0 {
			host, port, hasPort = d[:i], d[i+1:], true
		}
		if !validDomainName(host) {
			return false
		}
	}
	if hasPort {
		if port == "" {
			return false
		}
		for i := 0; i < len(port); i++ {
			if !isDigit(port[i]) {
				return false
			}
		}
	}
	return true
}

func validIPv6(h string) bool {
	inner := h[1 : len(h)-1]
	if inner == "" {
		return false
	}
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		if !(isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == ':') {
			return false
		}
	}
	return true
}

func validDomainName(h string) bool {
	for {
		label, rest, more := cut(h, '.')
		if label == "" || !isAlnum(label[0]) || !isAlnum(label[len(label)-1]) {
			return false
		}
		for i := 1; i < len(label)-1; i++ {
			if c := label[i]; !isAlnum(c) && c != '-' {
				return false
			}
		}
		if !more {
			return true
		}
		h = rest
	}
}

// validRemote: path components separated by '/'.
func validRemote(name string) bool {
	for {
		comp, rest, more := cut(name, '/')
		if !validComponent(comp) {
			return false
		}
		if !more {
			return true
		}
		name = rest
	}
}

// validComponent: [a-z0-9]+ runs joined by one separator each, a separator
// being ".", "_", "__" or one or more "-".
func validComponent(p string) bool {
	if p == "" {
		return false
	}
	for i := 0; i < len(p); {
		if pathChar(p[i]) {
			i++
			continue
		}
		if i == 0 {
			return false
		}
		j := i
		for j < len(p) && !pathChar(p[j]) {
			j++
		}
		if j == len(p) || !separator(p[i:j]) {
			return false
		}
		i = j
	}
	return true
}

func pathChar(c byte) bool { return 'a' <= c && c <= 'z' || isDigit(c) }

func separator(s string) bool {
	switch s {
	case ".", "_", "__":
		return true
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			return false
		}
	}
	return true
}

// validTag: [\w][\w.-]{0,127}.
func validTag(t string) bool {
	if t == "" || len(t) > 128 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(isAlnum(c) || c == '_' || i > 0 && (c == '.' || c == '-')) {
			return false
		}
	}
	return true
}

// validDigestPattern: an algorithm of letter-led alphanumeric components
// joined by one of "-_+.", then ':' and at least 32 hexadecimal digits of
// either case.
func validDigestPattern(d string) bool {
	alg, enc, found := cut(d, ':')
	if !found || len(enc) < 32 {
		return false
	}
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	atStart := true
	for i := 0; i < len(alg); i++ {
		c := alg[i]
		switch {
		case atStart:
			if !isLetter(c) {
				return false
			}
			atStart = false
		case isAlnum(c):
		case c == '-' || c == '_' || c == '+' || c == '.':
			atStart = true
		default:
			return false
		}
	}
	return !atStart
}

// checkDigest is go-digest's Validate on a digest that matched
// validDigestPattern: sha256, sha384 and sha512 are supported, with their
// exact lengths of lower-case hex.
func checkDigest(d string) code {
	alg, enc, _ := cut(d, ':')
	var size int
	switch alg {
	case "sha256":
		size = 64
	case "sha384":
		size = 96
	case "sha512":
		size = 128
	default:
		if hasUpper(alg) {
			return digestFormat
		}
		return digestUnsupported
	}
	if len(enc) != size {
		return digestLength
	}
	for i := 0; i < len(enc); i++ {
		if !isLowerHex(enc[i]) {
			return digestFormat
		}
	}
	return ok
}
