package keyring

import (
	"errors"
	"fmt"
)

// Category sentinels. Every error this package returns wraps one of them,
// so callers branch with errors.Is; the typed errors below carry the
// object the error is about. No error ever holds credential material.
var (
	// ErrInvalidImage is an image reference that cannot be parsed.
	ErrInvalidImage = errors.New("invalid image reference")
	// ErrInvalidPattern is an image pattern that cannot be parsed or can
	// never match.
	ErrInvalidPattern = errors.New("invalid image pattern")
	// ErrInvalidDockerConfig is docker config data that cannot be decoded:
	// malformed JSON, a field of the wrong type, or a bad "auth" value.
	ErrInvalidDockerConfig = errors.New("invalid docker config")
	// ErrUnsupportedSecretType is a pull secret whose type is neither
	// kubernetes.io/dockerconfigjson nor kubernetes.io/dockercfg.
	ErrUnsupportedSecretType = errors.New("unsupported pull secret type")
	// ErrMissingSecretData is a pull secret without the data key its type
	// requires, or with that key empty.
	ErrMissingSecretData = errors.New("missing pull secret data")
)

// PatternError is an image pattern that ParsePattern rejected. Patterns
// are registry names, never credentials, so the pattern is included.
type PatternError struct {
	Pattern string
	Err     error
}

// Error implements error.
func (e *PatternError) Error() string {
	return fmt.Sprintf("%v %q: %v", ErrInvalidPattern, e.Pattern, e.Err)
}

// Unwrap returns ErrInvalidPattern and the underlying reason.
func (e *PatternError) Unwrap() []error { return []error{ErrInvalidPattern, e.Err} }
