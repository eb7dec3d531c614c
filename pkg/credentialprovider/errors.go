package credentialprovider

import (
	"errors"
	"fmt"
)

// Category errors. Callers branch on them with errors.Is; the errors this
// package returns wrap one of them and add what failed and on which object.
var (
	// ErrInvalidConfig is wrapped by every configuration loading or
	// validation failure (see ConfigError).
	ErrInvalidConfig = errors.New("invalid credential provider config")

	// ErrPluginTimeout: the plugin did not finish within its timeout and was
	// killed.
	ErrPluginTimeout = errors.New("credential provider plugin timed out")
	// ErrPluginCanceled: the run was canceled (every caller gave up, or the
	// Manager was closed) and the plugin was killed.
	ErrPluginCanceled = errors.New("credential provider plugin canceled")
	// ErrPluginStart: the plugin could not be started.
	ErrPluginStart = errors.New("credential provider plugin could not be started")
	// ErrPluginExit: the plugin exited with a non-zero status or was killed
	// by a signal.
	ErrPluginExit = errors.New("credential provider plugin failed")
	// ErrOutputTooLarge: the plugin wrote more than the configured limit to
	// stdout or stderr and was killed.
	ErrOutputTooLarge = errors.New("credential provider plugin output too large")
	// ErrInvalidResponse: the plugin's stdout is not a valid
	// CredentialProviderResponse for the request.
	ErrInvalidResponse = errors.New("invalid credential provider response")
	// ErrRecentFailure: the plugin failed for the same cache key a moment
	// ago and is not run again until the negative-cache TTL has passed.
	ErrRecentFailure = errors.New("credential provider plugin failed recently")

	// ErrServiceAccount: the pod's service account or its token could not
	// be obtained from the ServiceAccountTokenSource.
	ErrServiceAccount = errors.New("service account unavailable for credential provider")
	// ErrMissingAnnotation: the pod's service account lacks an annotation
	// that the provider's requiredServiceAccountAnnotationKeys require.
	ErrMissingAnnotation = errors.New("required service account annotation missing")
)

// ErrorKind names a class of plugin failure; it is the "kind" label of the
// plugin errors metric.
type ErrorKind string

// The kinds of plugin failure.
const (
	KindTimeout         ErrorKind = "timeout"
	KindCanceled        ErrorKind = "canceled"
	KindStart           ErrorKind = "start"
	KindExit            ErrorKind = "exit"
	KindOutputTooLarge  ErrorKind = "output_too_large"
	KindInvalidResponse ErrorKind = "invalid_response"
	KindEncodeRequest   ErrorKind = "encode_request"
)

var kindSentinels = map[ErrorKind]error{
	KindTimeout:         ErrPluginTimeout,
	KindCanceled:        ErrPluginCanceled,
	KindStart:           ErrPluginStart,
	KindExit:            ErrPluginExit,
	KindOutputTooLarge:  ErrOutputTooLarge,
	KindInvalidResponse: ErrInvalidResponse,
	KindEncodeRequest:   ErrPluginStart,
}

// PluginError is one failed plugin run. Its message names the plugin, the
// image and what went wrong (the exit code, the timeout, the offset of a
// JSON syntax error, ...); it never contains the plugin's stdout, its
// stderr or any credential. errors.Is matches the sentinel of its Kind.
type PluginError struct {
	Plugin string
	Image  string
	Kind   ErrorKind
	// ExitCode is the plugin's exit status for KindExit, or -1 when it was
	// killed by a signal; 0 otherwise.
	ExitCode int
	// Detail says what was wrong, for the message.
	Detail string
	// Err is an underlying cause that is safe to show, or nil.
	Err error
}

// Error implements error.
func (e *PluginError) Error() string {
	msg := fmt.Sprintf("credential provider plugin %q for image %q: %s", e.Plugin, e.Image, e.Detail)
	if e.Image == "" {
		// A pass-through run (Passthrough) is for no image of its own.
		msg = fmt.Sprintf("credential provider plugin %q: %s", e.Plugin, e.Detail)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the kind's sentinel and the underlying cause.
func (e *PluginError) Unwrap() []error {
	errs := make([]error, 0, 2)
	if s, ok := kindSentinels[e.Kind]; ok {
		errs = append(errs, s)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}
