package criruntime

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	remoteerrors "github.com/containerd/containerd/v2/core/remotes/errors"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/leak"
)

// Category errors. Callers branch on them with errors.Is; the errors this
// package returns wrap one of them and say what failed on which image.
var (
	// ErrInvalidReference: the image name is not a valid image reference.
	ErrInvalidReference = errors.New("invalid image reference")
	// ErrUnauthorized: the registry refused the credentials (401) or
	// denied access to the repository (403).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrNotFound: the registry does not know the repository or manifest.
	ErrNotFound = errors.New("not found")
	// ErrUnsupportedManifest: the manifest is of a kind this runtime does not
	// pull (Docker schema 1, nested indexes, unknown media types).
	ErrUnsupportedManifest = errors.New("unsupported manifest")
	// ErrNoMatchingPlatform: an image index has no manifest for the runtime's
	// platform.
	ErrNoMatchingPlatform = errors.New("no matching manifest for platform")
	// ErrDigestMismatch: content did not hash to the digest it was asked for.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrStateInUse: another Embedded (in this or another process) owns
	// the state directory.
	ErrStateInUse = errors.New("image state directory in use")
	// ErrInvalidEndpoint: a CRI endpoint is malformed or not a unix socket.
	ErrInvalidEndpoint = errors.New("invalid image service endpoint")
)

// registryError is a registry failure with its message scrubbed of
// credentials. It unwraps to a category sentinel (or none), never to the
// original error, so no caller can print the unscrubbed text.
type registryError struct {
	status int
	msg    string
	kind   error
}

func (e *registryError) Error() string { return e.msg }
func (e *registryError) Unwrap() error { return e.kind }

// StatusCode returns the HTTP status code the registry answered with, or 0
// when err does not carry one.
func StatusCode(err error) int {
	var re *registryError
	if errors.As(err, &re) {
		return re.status
	}
	return 0
}

// registryFailure turns an error from go-containerregistry, or from
// containerd's registry library (a token realm's answer: its 401 or 403 is
// a refusal of the credential, ErrUnauthorized), into one that states the
// registry's answer ("401 Unauthorized") and holds no secret from auth. Context errors pass through unchanged so errors.Is(err,
// context.Canceled) keeps working.
func registryFailure(err error, auth *runtimeapi.AuthConfig) error {
	if err == nil {
		return nil
	}
	code, realm := 0, false
	var te *transport.Error
	var ue remoteerrors.ErrUnexpectedStatus // containerd's authorizer: a token realm's answer
	switch {
	case errors.As(err, &te):
		code = te.StatusCode
	case errors.As(err, &ue):
		code, realm = ue.StatusCode, true
	case isContextErr(err) || errors.Is(err, ErrDigestMismatch) || errors.Is(err, ErrUnsupportedManifest):
		return err // context errors and this package's own errors carry no secret
	default:
		return &registryError{msg: RedactAuth(err.Error(), auth)}
	}
	msg := RedactAuth(err.Error(), auth)
	status := fmt.Sprintf("%d %s", code, http.StatusText(code))
	if !strings.Contains(msg, status) {
		msg = status + ": " + msg
	}
	re := &registryError{status: code, msg: msg}
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		re.kind = ErrUnauthorized
	case http.StatusNotFound:
		// A token realm that does not exist says nothing of the
		// manifest: only the registry's own 404 is ErrNotFound.
		if !realm {
			re.kind = ErrNotFound
		}
	}
	return re
}

// RedactAuth removes every credential field of auth from msg, in every
// form it can take there (plain, base64 alone or inside "user:password",
// JSON- and URL-escaped; see package leak), and, whole, the Authorization
// header a runtime sends for a username and password (a registry may echo
// what it was sent).
func RedactAuth(msg string, auth *runtimeapi.AuthConfig) string {
	if auth == nil {
		return msg
	}
	var secrets []string
	if auth.GetUsername() != "" || auth.GetPassword() != "" {
		// base64 of "username:password", whole, before its password is.
		secrets = append(secrets, base64.StdEncoding.EncodeToString([]byte(auth.GetUsername()+":"+auth.GetPassword())))
	}
	secrets = append(secrets, leak.BasicAuth(auth.GetAuth())...)
	secrets = append(secrets, auth.GetPassword(), auth.GetIdentityToken(), auth.GetRegistryToken())
	return leak.Redact(msg, secrets...)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
