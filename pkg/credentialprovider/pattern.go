package credentialprovider

import (
	"errors"
	"strings"

	"github.com/pullguard/pullguard/pkg/keyring"
)

// errSchemeInPattern rejects "https://registry.example": kubelet image
// patterns name a registry, not a URL.
var errSchemeInPattern = errors.New("must not include a scheme")

// compilePattern checks and compiles one matchImages entry or response
// auth key with keyring.ParsePattern (the matching rules of the whole
// module), and also rejects a scheme. The returned error is the keyring's
// reason without the pattern itself, so callers decide whether to show it.
func compilePattern(p string) (keyring.Pattern, error) {
	if strings.Contains(p, "://") {
		return keyring.Pattern{}, errSchemeInPattern
	}
	pat, err := keyring.ParsePattern(p)
	if err != nil {
		var pe *keyring.PatternError
		if errors.As(err, &pe) {
			return keyring.Pattern{}, pe.Err
		}
		return keyring.Pattern{}, err
	}
	return pat, nil
}

// validatePattern reports whether p is a valid image pattern.
func validatePattern(p string) error {
	_, err := compilePattern(p)
	return err
}

// pathWildcard reports a matchImages entry with a '*' in its path, such as
// "registry.io/*". The kubelet loads such an entry and it never matches
// (its path is compared as a literal prefix); pullguard loads it too,
// ignores it, and reports it in Config.Warnings.
func pathWildcard(p string) bool {
	_, path, ok := strings.Cut(p, "/")
	return ok && !strings.Contains(p, "://") && strings.Contains(path, "*")
}
