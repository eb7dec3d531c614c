package imagemanager

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	pgruntime "github.com/pullguard/pullguard/pkg/runtime"
)

// errUnverifiedPull marks a pull the runtime reported as done whose
// manifest the registry did not serve as the runtime resolved it.
var errUnverifiedPull = errors.New("pull not verified")

// ManifestVerifier proves that the registry serves image's manifest to
// auth: it fetches the manifest bytes with auth, hashes them, and fails
// unless the digest is one of expected (or, for a digest reference, the
// reference's digest). pkg/runtime.VerifyManifest is one.
type ManifestVerifier func(ctx context.Context, image string, auth *runtimeapi.AuthConfig, expected []string) (string, error)

// WithManifestVerification checks every successful pull with v before the
// manager accepts it. Use it with a runtime that resolves a reference by
// trusting the registry's Docker-Content-Digest header (containerd does):
// such a runtime names content it already holds after a registry merely
// claimed its digest, without serving a byte. The expected digests are the
// runtime's RepoDigests of the pulled image for the pulled repository. A
// failed check fails that credential's pull: nothing is recorded. The
// embedded runtime checks the bytes itself and needs no verifier.
func WithManifestVerification(v ManifestVerifier) Option {
	return func(m *Manager) { m.verify = v }
}

// verifyPull checks a pull the runtime reported as successful.
func (m *Manager) verifyPull(ctx context.Context, image string, auth *runtimeapi.AuthConfig) error {
	if m.verify == nil {
		return nil
	}
	ref, err := name.ParseReference(image)
	if err != nil {
		return fmt.Errorf("failed to verify the pull of %q: %w", image, err)
	}
	var expected []string
	if _, byDigest := ref.(name.Digest); !byDigest {
		st, err := m.images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
		if err != nil {
			return fmt.Errorf("failed to verify the pull of %q: %w", image, err)
		}
		if expected, err = pgruntime.ResolvedDigests(image, st.GetImage()); err != nil {
			return fmt.Errorf("failed to verify the pull of %q: %w", image, err)
		}
	}
	got, err := m.verify(ctx, image, auth, expected)
	if err != nil {
		return err
	}
	m.logger.V(3).Info("Verified the registry served the manifest", "image", image, "digest", got)
	return nil
}
