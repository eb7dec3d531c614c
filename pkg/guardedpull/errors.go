package guardedpull

import (
	"context"
	"errors"

	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// The categories of a pull's error, for errors.Is.
var (
	// ErrNoIntent: the pull's intent could not be recorded durably, so
	// nothing was pulled (a pull the node could forget after a crash would
	// make a credential-pulled image look preloaded).
	ErrNoIntent = errors.New("pull intent not recorded")
	// ErrUnverified: the runtime reported the pull done, but the registry
	// did not serve the manifest the runtime resolved (or the runtime
	// reported nothing to check). Nothing was recorded and the intent
	// stays unresolved.
	ErrUnverified = errors.New("pull not verified")
	// ErrRefused: before the runtime was asked, the registry refused the
	// attempt's credential the manifest of the image present under the
	// name (401, 403), or does not know it (404): the runtime's pull would
	// have been refused the same, so it was not asked. The error says
	// which (it wraps pkg/criruntime's ErrUnauthorized or ErrNotFound).
	ErrRefused = errors.New("the registry refused the pull")
)

// classes are what a redacted error still answers errors.Is for.
var classes = []error{ErrUnverified, ErrRefused, criruntime.ErrUnauthorized, criruntime.ErrNotFound, criruntime.ErrRegistryTimeout, context.Canceled, context.DeadlineExceeded}

// redactedError is an error whose text had a credential removed. It keeps
// the classes callers branch on and the gRPC code, never the original
// error, so that no caller can print the unredacted text.
type redactedError struct {
	msg     string
	st      *status.Status // nil: the original carried no gRPC status
	classes []error
}

func (e *redactedError) Error() string   { return e.msg }
func (e *redactedError) Unwrap() []error { return e.classes }

// GRPCStatus keeps the original's code, with the redacted text.
func (e *redactedError) GRPCStatus() *status.Status { return e.st }

// redacted returns err with every form of every auth's secrets removed
// from its text (pkg/criruntime's RedactAuth): a runtime's error may quote
// what a registry answered, and a registry may echo what it was sent. An
// error that holds none is returned as it is.
func redacted(err error, auths []*runtimeapi.AuthConfig) error {
	msg := err.Error()
	clean := msg
	for _, a := range auths {
		clean = criruntime.RedactAuth(clean, a)
	}
	if clean == msg {
		return err
	}
	r := &redactedError{msg: clean}
	if s, ok := status.FromError(err); ok {
		r.st = status.New(s.Code(), clean)
	}
	for _, c := range classes {
		if errors.Is(err, c) {
			r.classes = append(r.classes, c)
		}
	}
	return r
}

// authsOf is every AuthConfig the attempts send or present.
func authsOf(attempts []Attempt) []*runtimeapi.AuthConfig {
	var out []*runtimeapi.AuthConfig
	for _, a := range attempts {
		out = append(out, a.Auth, criAuth(a.Credential.Auth))
	}
	return out
}
