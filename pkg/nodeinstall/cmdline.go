package nodeinstall

import (
	"fmt"
	"regexp"
	"strings"
)

// SplitCommandLine splits an ExecStart= value into words as systemd does:
// words separated by white space, double- and single-quoted words, a
// backslash escaping the next character (outside single quotes). The
// prefixes of the executable ("-", "@", ":", "+", "!") are removed. "$" is
// kept for Expand.
func SplitCommandLine(s string) ([]string, error) {
	s = strings.TrimLeft(strings.TrimSpace(s), "-@:+!")
	var words []string
	var b strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("command line ends with a backslash")
			}
			i++
			if s[i] == '\n' {
				// A continuation line.
				if inWord {
					words = append(words, b.String())
					b.Reset()
					inWord = false
				}
				continue
			}
			b.WriteByte(s[i])
			inWord = true
		case c == '"' || c == '\'':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("unterminated %c quote at column %d", c, i+1)
			}
			q := s[i+1 : i+1+end]
			if c == '"' {
				q = unquote(`"` + q + `"`)
			}
			b.WriteString(q)
			i += end + 1
			inWord = true
		default:
			b.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, b.String())
	}
	return words, nil
}

var (
	wholeVar = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)
	braceVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

// Word is a word of an expanded command line and the variable it came
// from ("" for a literal word).
type Word struct {
	Text, Var string
}

// Expand replaces the environment variables of an ExecStart's words as
// systemd does: a word that is "$NAME" alone becomes the variable's value
// split at white space (zero or more words); "${NAME}" anywhere in a word is
// replaced by the value as it is. Unset variables are empty; "$$" is a "$".
func Expand(words []string, env map[string]string) []Word {
	var out []Word
	for _, w := range words {
		if strings.Contains(w, "$$") {
			out = append(out, Word{Text: strings.ReplaceAll(w, "$$", "$")})
			continue
		}
		if m := wholeVar.FindStringSubmatch(w); m != nil {
			for _, f := range strings.Fields(env[m[1]]) {
				out = append(out, Word{Text: f, Var: m[1]})
			}
			continue
		}
		variable := ""
		w = braceVar.ReplaceAllStringFunc(w, func(v string) string {
			variable = braceVar.FindStringSubmatch(v)[1]
			return env[variable]
		})
		out = append(out, Word{Text: w, Var: variable})
	}
	return out
}
