package imageref

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

// ErrInvalid is the class of every error Parse returns: errors.Is(err,
// ErrInvalid) reports an image name the kubelet rejects (its
// InvalidImageName).
var ErrInvalid = errors.New("invalid image name")

// ErrHexName is the class of a name that is a 64-character hexadecimal
// string, which distribution/reference refuses as a repository name
// because it looks like an image ID.
var ErrHexName = errors.New("cannot specify 64-byte hexadecimal strings")

// Error is a rejected image name. Its message is the kubelet's
// ("couldn't parse image name %q: <reason>"); Err is the reason, one of
// distribution/reference's error values (reference.ErrReferenceInvalidFormat,
// reference.ErrNameContainsUppercase, reference.ErrNameTooLong,
// digest.ErrDigestInvalidFormat, ...) or an error wrapping one, so callers
// can branch with errors.Is on the same values as with distribution/reference.
type Error struct {
	Image string
	Err   error
}

func (e *Error) Error() string {
	return "couldn't parse image name " + strconv.Quote(e.Image) + ": " + e.Err.Error()
}

// Unwrap returns ErrInvalid and the reason.
func (e *Error) Unwrap() []error { return []error{ErrInvalid, e.Err} }

// Reason returns the reason alone, with the message distribution/reference
// gives for it.
func (e *Error) Reason() error { return e.Err }

// classError carries distribution/reference's message for a reason that
// it formats instead of returning a variable, and wraps a class.
type classError struct {
	class error
	msg   string
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.class }

// code is the outcome of a parse; the error is built only on failure.
type code uint8

const (
	ok code = iota
	badFormat
	upperCase
	upperRemote
	hexName
	tooLong
	digestFormat
	digestLength
	digestUnsupported
)

func newError(image string, c code, remote string) error {
	var reason error
	switch c {
	case upperCase:
		reason = reference.ErrNameContainsUppercase
	case upperRemote:
		reason = &classError{class: reference.ErrNameContainsUppercase,
			msg: fmt.Sprintf("invalid reference format: repository name (%s) must be lowercase", remote)}
	case hexName:
		reason = &classError{class: ErrHexName,
			msg: fmt.Sprintf("invalid repository name (%s), cannot specify 64-byte hexadecimal strings", image)}
	case tooLong:
		reason = reference.ErrNameTooLong
	case digestFormat:
		reason = digest.ErrDigestInvalidFormat
	case digestLength:
		reason = digest.ErrDigestInvalidLength
	case digestUnsupported:
		reason = digest.ErrDigestUnsupported
	default:
		reason = reference.ErrReferenceInvalidFormat
	}
	return &Error{Image: image, Err: reason}
}
