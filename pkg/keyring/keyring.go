package keyring

import (
	"context"

	"github.com/pullguard/pullguard/pkg/credential"
)

// Keyring finds the credentials to try when pulling an image.
//
// Lookup returns the candidates for image in the order they should be
// tried, the kubelet's order (see the package documentation); an empty
// result means an anonymous pull. A keyring that cannot fully answer (a
// credential provider plugin failed) returns the candidates it has
// together with an error describing the failure; callers go on with the
// candidates and report the error. Lookup
// is safe for concurrent use and never returns credential material in its
// error.
type Keyring interface {
	Lookup(ctx context.Context, image string) ([]credential.Credential, error)
}

// Func adapts an ordinary function to the Keyring interface.
type Func func(ctx context.Context, image string) ([]credential.Credential, error)

// Lookup calls f(ctx, image).
func (f Func) Lookup(ctx context.Context, image string) ([]credential.Credential, error) {
	return f(ctx, image)
}
