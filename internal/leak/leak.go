// Package leak holds the forms a secret takes in text, to keep secrets out
// of output (Redact) and to prove in tests that none got out (Scan). The
// forms are the secret itself, JSON-escaped, URL query- and path-escaped,
// and base64 in the standard and URL alphabets at each of the three
// alignments a secret can have inside a longer base64 text (as a password
// inside base64 "user:password", or inside a base64 docker config).
//
// pkg/criruntime and pkg/credentialprovider redact with it, and the tests of
// every package that handles credentials scan with it; it depends on the
// standard library only.
package leak

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
)

// MinLen is the shortest secret Redact and Scan look for; shorter ones
// would match ordinary text.
const MinLen = 4

// minForm is the shortest base64 fragment that counts as a form.
const minForm = 6

// Placeholder replaces a secret in redacted text.
const Placeholder = "<redacted>"

// Forms returns every form of secret, longest first, without duplicates.
// A secret shorter than MinLen has none.
func Forms(secret string) []string {
	if len(secret) < MinLen {
		return nil
	}
	// Text forms, then each of them base64-encoded (a base64 docker config
	// holds the JSON-escaped password).
	texts := map[string]bool{secret: true, url.QueryEscape(secret): true, url.PathEscape(secret): true}
	for _, once := range jsonEscapes(secret) {
		texts[once] = true
		for _, twice := range jsonEscapes(once) {
			texts[twice] = true
		}
	}
	set := map[string]bool{}
	for t := range texts {
		set[t] = true
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			set[enc.EncodeToString([]byte(t))] = true
			for _, f := range alignedForms(enc, t) {
				if len(f) >= minForm {
					set[f] = true
				}
			}
		}
	}
	out := make([]string, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

// jsonEscapes returns s as inside a JSON string, with and without the
// HTML escaping encoding/json does by default.
func jsonEscapes(s string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(s) == nil {
			q := strings.TrimSuffix(b.String(), "\n")
			out = append(out, q[1:len(q)-1])
		}
	}
	return out
}

// alignedForms returns, for each of the three byte offsets secret can
// start at in a base64 text, the characters that depend on secret's bytes
// only.
func alignedForms(enc *base64.Encoding, secret string) []string {
	var out []string
	for k := 0; k < 3; k++ {
		enc := enc.WithPadding(base64.NoPadding)
		s := enc.EncodeToString(append(make([]byte, k), secret...))
		// The first ceil(4k/3) characters involve the k prefix bytes; the
		// last group may involve bytes after the secret.
		start := (4*k + 2) / 3
		end := (k + len(secret)) / 3 * 4
		if end > start {
			out = append(out, s[start:end])
		}
	}
	return out
}

// BasicAuth returns the secrets in a docker config "auth" field (base64
// of "user:password"): the field, the password it decodes to (and that
// password without NUL at its ends, as containerd presents it) and, when
// the field is not spelled as an Authorization header would spell it
// (unpadded, over-padded, URL alphabet), that header's base64. A field
// with extra or missing "=" still decodes: redaction reads more spellings
// than the readers of the field (internal/dockerauth) accept.
func BasicAuth(auth string) []string {
	out := []string{auth}
	trimmed := strings.TrimRight(auth, "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(trimmed); err == nil {
			if _, pw, ok := strings.Cut(string(b), ":"); ok {
				out = append(out, pw)
				if t := strings.Trim(pw, "\x00"); t != pw {
					out = append(out, t)
				}
				if h := base64.StdEncoding.EncodeToString(b); h != auth {
					out = append(out, h)
				}
			}
			break
		}
	}
	return out
}

// Redact replaces every form of every secret in text with Placeholder.
func Redact(text string, secrets ...string) string {
	for _, s := range secrets {
		for _, f := range Forms(s) {
			text = strings.ReplaceAll(text, f, Placeholder)
		}
	}
	return text
}

// Finding is one form of a secret found in a text.
type Finding struct {
	Secret int    // index in the secrets given
	Form   string // the form found
	Where  string // the name of the text
}

// Scan looks for every form of every secret in each named text.
func Scan(texts map[string]string, secrets ...string) []Finding {
	var out []Finding
	names := make([]string, 0, len(texts))
	for n := range texts {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, s := range secrets {
		forms := Forms(s)
		for _, n := range names {
			for _, f := range forms {
				if strings.Contains(texts[n], f) {
					out = append(out, Finding{Secret: i, Form: f, Where: n})
					break
				}
			}
		}
	}
	return out
}
