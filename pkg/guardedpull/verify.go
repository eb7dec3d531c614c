package guardedpull

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
// registry is not asked again. The caller's context is used, within what
// is left of b: a pull the caller gave up on, or whose Verifier ran out of
// time, fails its check and stays unverified, which only asks for more
// verification.
func (p *Puller) verify(ctx context.Context, b *budget, image string, auth *runtimeapi.AuthConfig, img *runtimeapi.Image, served string) error {
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
	got, err := b.verify(ctx, p.verifier, image, auth, expected)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnverified, err)
	}
	p.log(ctx).V(3).Info("Verified the registry served the manifest", "image", image, "digest", got)
	return nil
}

// precheck is what the registry answered one attempt's credential for the
// present image, before the runtime was asked.
type precheck struct {
	served  string // the digest of the bytes served, if any
	refused error  // the registry refused the credential or does not know the manifest
}

// checkPresent asks the Verifier whether the registry serves img, the
// image present under image's name, to each attempt's credential in order:
// the same proof as after a pull, the expected digests being img's own. It
// returns the index of the first attempt whose bytes prove access (-1:
// none), and every attempt's answer up to it. An error ends the pull: the
// Verifier ran out of time (b), or ctx ended. Without a Verifier there is
// no proof to make: the pull goes to the runtime.
func (p *Puller) checkPresent(ctx context.Context, b *budget, image string, attempts []Attempt, img *runtimeapi.Image) ([]precheck, int, error) {
	if p.verifier == nil {
		return nil, -1, nil
	}
	logger := p.log(ctx).WithValues("image", image, "imageRef", img.GetId())
	expected, err := criruntime.ResolvedDigests(image, img)
	if err != nil {
		logger.V(2).Info("The present image has no digest to verify; pulling", "err", err.Error())
		return nil, -1, nil
	}
	pre := make([]precheck, len(attempts))
	for i, a := range attempts {
		auth := criAuth(a.Credential.Auth)
		got, err := b.verify(ctx, p.verifier, image, auth, expected)
		pre[i].served = got
		switch {
		case err == nil:
			logger.V(2).Info("The registry served the present image's manifest; answered without the runtime's pull", "digest", got)
			return pre, i, nil
		case ctx.Err() != nil:
			return nil, -1, err
		case errors.Is(err, context.DeadlineExceeded):
			return nil, -1, fmt.Errorf("the registry did not answer %s, so the runtime was not asked to pull: %w", b.within(), err)
		case errors.Is(err, criruntime.ErrUnauthorized) || errors.Is(err, criruntime.ErrNotFound):
			// The runtime's pull would be refused the same: its requests
			// would only double the registry's count.
			pre[i].refused = fmt.Errorf("%w: %w", ErrRefused, err)
			logger.V(2).Info("The registry refused the present image's manifest to the credential; not asking the runtime", "err", redacted(err, []*runtimeapi.AuthConfig{auth}).Error())
		default:
			logger.V(2).Info("The registry did not serve the present image's manifest; pulling", "err", redacted(err, []*runtimeapi.AuthConfig{auth}).Error())
		}
	}
	return pre, -1, nil
}

// budget is the time one Pull may still spend asking the Verifier.
type budget struct {
	total time.Duration // 0: no bound
	spent time.Duration
	asked bool // the Verifier was called
}

func (p *Puller) newBudget() *budget { return &budget{total: p.verifyTimeout} }

// within says what the budget allowed, for an error.
func (b *budget) within() string {
	if b.total <= 0 {
		return "in time"
	}
	return "within the verification's " + b.total.String()
}

// verify asks v within what is left of the budget.
func (b *budget) verify(ctx context.Context, v Verifier, image string, auth *runtimeapi.AuthConfig, expected []string) (string, error) {
	b.asked = true
	if b.total <= 0 {
		return v.VerifyManifest(ctx, image, auth, expected)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, b.total-b.spent)
	defer cancel()
	got, err := v.VerifyManifest(ctx, image, auth, expected)
	b.spent += time.Since(start)
	return got, err
}
