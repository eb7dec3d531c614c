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

// SecretError is a pull secret, or one entry of it, that the keyring
// skipped. It names the secret and the field at fault, never its content.
// Field is "type", "data[KEY]" for the whole data value, or
// `data[.dockerconfigjson].auths["ENTRY"]` (`data[.dockercfg]["ENTRY"]`)
// for one entry whose key is not a valid pattern (only that entry is
// skipped).
type SecretError struct {
	Namespace string
	Name      string
	UID       string
	Field     string
	Err       error
}

// Error implements error.
func (e *SecretError) Error() string {
	return fmt.Sprintf("pull secret %s/%s: %s: %v", e.Namespace, e.Name, e.Field, e.Err)
}

// Unwrap returns the reason, which wraps one of the category sentinels.
func (e *SecretError) Unwrap() error { return e.Err }

// ConfigFileError is a node docker config file that could not be read or
// parsed (and was passed over), or one entry of it that was skipped.
type ConfigFileError struct {
	Path string
	Err  error
}

// Error implements error.
func (e *ConfigFileError) Error() string {
	return fmt.Sprintf("docker config %s: %v", e.Path, e.Err)
}

// Unwrap returns the reason.
func (e *ConfigFileError) Unwrap() error { return e.Err }
