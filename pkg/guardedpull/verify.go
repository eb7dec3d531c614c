package guardedpull

import (
	"context"
	"fmt"
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// Verifier proves that the registry serves image's manifest to auth ("no
// digest without bytes"): it fetches the manifest bytes with auth, hashes
// them, and fails unless the digest is one of expected (for a digest
// reference, expected is empty and the bytes must hash to the reference's
// digest). It returns the digest of the bytes served, also with the error
// of bytes that are not of an expected digest (the registry served them
// to auth); with any other error, "". Its error may quote the registry;
// the Puller removes auth's secrets from it.
type Verifier interface {
	VerifyManifest(ctx context.Context, image string, auth *runtimeapi.AuthConfig, expected []string) (string, error)
}

// VerifierFunc adapts a function to Verifier.
type VerifierFunc func(ctx context.Context, image string, auth *runtimeapi.AuthConfig, expected []string) (string, error)

// VerifyManifest calls f.
func (f VerifierFunc) VerifyManifest(ctx context.Context, image string, auth *runtimeapi.AuthConfig, expected []string) (string, error) {
	return f(ctx, image, auth, expected)
}

var _ Verifier = VerifierFunc(nil)

// RegistryVerifier is the Verifier that asks the registry itself:
// pkg/criruntime's VerifyManifest, with opts (its transport and user agent).
func RegistryVerifier(opts ...criruntime.Option) Verifier {
	return VerifierFunc(func(ctx context.Context, image string, auth *runtimeapi.AuthConfig, expected []string) (string, error) {
		return criruntime.VerifyManifest(ctx, image, auth, expected, opts...)
	})
}

// verify checks a pull the runtime reported done; img is the runtime's
// status of the pulled image (nil if it reported none). The expected
// digests are img's RepoDigests in the pulled repository; a tag whose
// image has none there fails closed, without asking the Verifier. served
// is the digest of the bytes the registry served this pull's credential
// for the name just before the runtime's pull ("" if none): when the
// runtime resolved the name to it, those bytes are the proof, and the
// registry is not asked again. The caller's context is used: a pull the
// caller gave up on fails its check and stays unverified, which only asks
// for more verification.
func (p *Puller) verify(ctx context.Context, image string, auth *runtimeapi.AuthConfig, img *runtimeapi.Image, served string) error {
	if p.verifier == nil {
		return nil
	}
	expected, err := criruntime.ResolvedDigests(image, img)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnverified, err)
	}
	if served != "" && slices.Contains(expected, served) {
		p.log(ctx).V(3).Info("The registry served the manifest the runtime resolved before the pull", "image", image, "digest", served)
		return nil
	}
	got, err := p.verifier.VerifyManifest(ctx, image, auth, expected)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnverified, err)
	}
	p.log(ctx).V(3).Info("Verified the registry served the manifest", "image", image, "digest", got)
	return nil
}

// fromPresent asks the Verifier whether the registry serves img, the
// image present under image's name, to auth: the same proof as after a
// pull, the expected digests being img's own. It returns the digest of
// the bytes the registry served, if it served any, and whether they
// prove access. Without a Verifier there is no proof to make: the pull
// goes to the runtime.
func (p *Puller) fromPresent(ctx context.Context, image string, auth *runtimeapi.AuthConfig, img *runtimeapi.Image) (string, bool) {
	if p.verifier == nil {
		return "", false
	}
	logger := p.log(ctx).WithValues("image", image, "imageRef", img.GetId())
	expected, err := criruntime.ResolvedDigests(image, img)
	if err != nil {
		logger.V(2).Info("The present image has no digest to verify; pulling", "err", err.Error())
		return "", false
	}
	got, err := p.verifier.VerifyManifest(ctx, image, auth, expected)
	if err != nil {
		logger.V(2).Info("The registry did not serve the present image's manifest; pulling", "err", redacted(err, []*runtimeapi.AuthConfig{auth}).Error())
		return got, false
	}
	logger.V(2).Info("The registry served the present image's manifest; answered without the runtime's pull", "digest", got)
	return got, true
}
