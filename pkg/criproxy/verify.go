package criproxy

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	pgruntime "github.com/pullguard/pullguard/pkg/runtime"
)

// ManifestVerifier proves that the registry serves image's manifest to
// auth: it GETs the manifest bytes with auth, hashes them, and fails
// unless the digest is one of expected (for a digest reference, expected
// is empty and the bytes must hash to the reference's digest). It returns
// the digest of the bytes served. pkg/runtime.VerifyManifest is one; the
// proxy has no check of its own.
type ManifestVerifier func(ctx context.Context, image string, auth *runtimeapi.AuthConfig, expected []string) (string, error)

// WithManifestVerification checks every forwarded pull the backend reports
// as successful with v before the proxy accepts it ("no digest without
// bytes"). Use it with a backend that resolves a reference by trusting
// the registry's Docker-Content-Digest header, as containerd does: such a
// runtime names content it already holds after a registry merely claimed
// its digest, without serving a byte. The expected digests are the
// backend's RepoDigests of the pulled image in the pulled repository. A
// failed check fails the pull with PermissionDenied, records nothing and
// leaves the pull's intent unresolved, so that the name needs verification
// (now, and after a restart). pullguard's embedded runtime GETs and hashes
// every manifest itself and needs no verifier. The check costs one
// manifest GET per forwarded successful pull; pulls answered from a
// record make none.
func WithManifestVerification(v ManifestVerifier) Option {
	return func(s *Server) { s.verify = v }
}

// verifyPull checks a pull the backend reported as successful; img is the
// backend's status of the pulled image (nil if it reported none).
func (s *Server) verifyPull(ctx context.Context, image string, auth *runtimeapi.AuthConfig, img *runtimeapi.Image) (string, error) {
	if s.verify == nil {
		return "", nil
	}
	expected, err := pgruntime.ResolvedDigests(image, img)
	if err != nil {
		return "", err
	}
	return s.verify(ctx, image, verifyAuth(auth), expected)
}

// verifyAuth is the credential the check presents: the pull's, in the
// canonical form the proxy hashes and records (an "auth" that says the
// same as the username and password is folded into them; see
// canonicalAuth), so that what the registry served to is what is
// recorded. Nil for an anonymous pull.
func verifyAuth(auth *runtimeapi.AuthConfig) *runtimeapi.AuthConfig {
	a := canonicalAuth(auth)
	if a.Empty() {
		return nil
	}
	return &runtimeapi.AuthConfig{
		Username:      a.Username,
		Password:      a.Password,
		Auth:          a.Auth,
		ServerAddress: auth.GetServerAddress(),
		IdentityToken: a.IdentityToken,
		RegistryToken: a.RegistryToken,
	}
}

// unverifiedError is the status the client gets for a pull that failed
// its check: PermissionDenied, saying the registry did not serve the
// manifest, with every form of auth's secrets removed (a registry may
// echo what it was sent).
func unverifiedError(image string, auth *runtimeapi.AuthConfig, err error) error {
	msg := fmt.Sprintf("pullguard: the registry did not serve the manifest of %q that the runtime resolved, so the pull is not accepted: %v", image, err)
	return status.Error(codes.PermissionDenied, pgruntime.RedactAuth(msg, auth))
}

// redactedError is err, a gRPC status, with every form of auth's secrets
// removed from its message; its code is kept (its details are dropped
// when the message had to be redacted).
func redactedError(err error, auth *runtimeapi.AuthConfig) error {
	st := status.Convert(err)
	msg := pgruntime.RedactAuth(st.Message(), auth)
	if msg == st.Message() {
		return err
	}
	return status.Error(st.Code(), msg)
}
