package credentialprovider

import (
	"errors"

	"github.com/pullguard/pullguard/pkg/keyring"
)

// compilePattern compiles one matchImages entry with keyring.ParsePattern,
// which reads it as the kubelet does (the module's one matcher). It fails
// only where the kubelet's validation of the entry fails; the returned
// error is the keyring's reason without the pattern itself, so callers
// decide whether to show it.
func compilePattern(p string) (keyring.Pattern, error) {
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

// validatePattern reports whether p is a valid matchImages entry.
func validatePattern(p string) error {
	_, err := compilePattern(p)
	return err
}

// neverMatches describes a matchImages entry that the kubelet loads and
// that can never match an image (keyring.Pattern.Unmatchable): one with a
// '*' in its path, such as "registry.io/*" (the path is compared as a
// literal prefix, and no repository holds a '*'), or with a scheme, such
// as "https://registry.io" (the kubelet puts "https://" in front of the
// entry, so its host is "https:" and its path starts with "//"). It
// returns "" for any other entry. pullguard loads such an entry too, and
// reports it in Config.Warnings.
func neverMatches(p string) string {
	pat, err := keyring.ParsePattern(p)
	if err != nil {
		return "" // an error, reported by validation
	}
	if why := pat.Unmatchable(); why != "" {
		return "it never matches an image: " + why + "; the kubelet loads it and never matches it"
	}
	return ""
}
