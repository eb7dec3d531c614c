package guardedpull

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
)

// ImageService is the part of a CRI image service a pull uses.
type ImageService interface {
	PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
}

// afterPullTimeout bounds the runtime calls made after a pull ended (the
// image's ID, the check after a failed pull), which must run even when the
// caller's context is gone.
const afterPullTimeout = 30 * time.Second

// Puller makes guarded pulls (see the package doc). It is safe for
// concurrent use.
type Puller struct {
	images   ImageService
	tracker  credtracker.Recorder
	verifier Verifier
	// verifyTimeout bounds the time one Pull spends in the Verifier, all
	// its calls together (0: no bound of the Puller's own).
	verifyTimeout time.Duration
	logger        klog.Logger
}

// Option sets an optional dependency of New.
type Option func(*Puller)

// WithVerifier checks every pull the runtime reports done with v before
// it is accepted. Use it with a runtime that resolves a reference by
// trusting the registry's Docker-Content-Digest header (containerd does).
// Without it, a pull the runtime reports done is accepted as it is
// (pullguard's embedded runtime hashes every manifest itself).
func WithVerifier(v Verifier) Option { return func(p *Puller) { p.verifier = v } }

// WithVerifyTimeout bounds the time one Pull spends asking the Verifier,
// all its calls together (the present image's check and the check after
// the runtime's pull): a registry that stalls the Verifier adds at most d
// to a pull, and the pull then ends with an error wrapping
// context.DeadlineExceeded. 0 (the default) sets no bound of the Puller's
// own; the Verifier's may still apply.
func WithVerifyTimeout(d time.Duration) Option { return func(p *Puller) { p.verifyTimeout = d } }

// WithLogger sets the logger used when the context carries none.
func WithLogger(l klog.Logger) Option { return func(p *Puller) { p.logger = l } }

// New returns a Puller that pulls through images and records with tracker
// (credtracker.Disabled() with the gate off: nothing is recorded). An
// image stored by a failed pull is recorded through the tracker's
// credtracker.Importer; a tracker that is not one keeps such a pull's
// intent unresolved instead.
func New(images ImageService, tracker credtracker.Recorder, opts ...Option) (*Puller, error) {
	if images == nil || tracker == nil {
		return nil, errors.New("guarded pull: an image service and a tracker are required")
	}
	p := &Puller{images: images, tracker: tracker, logger: klog.Background()}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// Request is one image to pull.
type Request struct {
	// Spec is the image as the runtime is asked for it; Spec.Image is the
	// name the pull is recorded under.
	Spec *runtimeapi.ImageSpec
	// Sandbox is passed to the runtime's PullImage; it may be nil.
	Sandbox *runtimeapi.PodSandboxConfig
	// Attempts are tried in order until a pull succeeds and is verified;
	// none means one anonymous attempt.
	Attempts []Attempt
	// Admit, if set, is asked before each attempt; an error ends the pull
	// with it before that attempt reaches the runtime (the kubelet's
	// registry QPS). The check of a present image (see Puller.Pull) is
	// made after the first attempt's Admit.
	Admit func() error
}

// Attempt is one credential to pull with.
type Attempt struct {
	// Auth is what the runtime is sent; nil means Credential's fields, in
	// the CRI's form (none for an anonymous credential).
	Auth *runtimeapi.AuthConfig
	// Credential is what a verified pull records (its Source and Hash; the
	// zero Credential for an anonymous pull), and its fields are what the
	// Verifier presents to the registry, so that what the registry served
	// to is what is recorded.
	Credential credential.Credential
	// SourceOf, when set, gives the Source a pull this attempt succeeded
	// with is recorded under, in place of Credential's: asked once, after
	// the pull succeeded, so that a slow answer (the proxy's look-up of
	// the node's own credentials) runs beside the pull instead of before
	// it.
	SourceOf func() credential.Source
}

// Result is what a pull did.
type Result struct {
	// Ref is what the runtime's PullImage returned.
	Ref string
	// ID is the image ID the pull is recorded under: the runtime's status
	// of the pulled image, else Ref.
	ID string
	// Image is the runtime's status of the pulled image (nil if it
	// reported none).
	Image *runtimeapi.Image
	// Credential is the credential of the attempt that succeeded.
	Credential credential.Credential
	// Attempted is set when the runtime was asked to pull; it is not
	// when the present image's verification stood for the pull, or its
	// refusal was the answer.
	Attempted bool
	// Contacted is set when the registry was asked: by the Verifier (the
	// present image's check) or through the runtime's pull.
	Contacted bool
}

// Pull pulls req's image, guarded as the package doc says. When the
// runtime already holds an image under the name (an IfNotPresent pull of
// an image the caller's presence check hid from this pod, or an Always
// pull of a present image), the Verifier is first asked, with each
// attempt's credential in order, for the manifest of that present image
// (the digests of its RepoDigests in the pulled repository, as after a
// pull):
//
//   - served: it is the proof a pull would end with, and the present image
//     is the result (its ID as Ref, as the runtime's pull of an unchanged
//     tag answers), recorded with that credential, at the registry cost of
//     one authenticated manifest GET and no runtime pull;
//   - other bytes (the tag moved): the runtime pulls, verified as any
//     pull; when it resolved the name to the very digest of the bytes the
//     registry served that credential just before, those bytes are the
//     pull's proof and the registry is not asked again;
//   - refused (401, 403) or unknown (404): that attempt ends with the
//     registry's answer (ErrRefused) and the runtime is not asked, as its
//     pull would be refused the same (the registry cost of the runtime's
//     own refused pull, and no more);
//   - no answer within the Verifier's time (WithVerifyTimeout), or ctx
//     ended: the pull ends with that error, the runtime not asked;
//   - any other failure (unreachable, 5xx): the runtime's pull decides.
//
// Its error wraps ErrNoIntent (nothing was pulled), ErrUnverified or
// ErrRefused, or is the runtime's (the attempts' errors aggregated, each
// with every candidate credential removed).
func (p *Puller) Pull(ctx context.Context, req Request) (Result, error) {
	image := req.Spec.GetImage()
	if err := p.tracker.RecordPullIntent(image); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrNoIntent, err)
	}
	res, before, err := p.attempt(ctx, req)
	logger := p.log(ctx).WithValues("image", image)
	switch {
	case err == nil:
		if rerr := p.tracker.RecordImagePulled(image, res.ID, res.Credential); rerr != nil {
			logger.Error(rerr, "Failed to record a pulled image durably; it is remembered until the next restart", "imageRef", res.ID)
		}
	case errors.Is(err, ErrUnverified):
		logger.Info("A pull was not verified; its intent stays unresolved so the name requires verification", "err", err.Error())
	default:
		p.failed(ctx, logger, req.Spec, res.Attempted, before)
		logger.V(2).Info("The runtime's pull failed", "err", err.Error())
	}
	return res, err
}

// presence is the runtime's image under a name before a pull; known is
// false when the runtime could not say.
type presence struct {
	id    string
	img   *runtimeapi.Image // the runtime's status of it; nil if none
	known bool
}

// attempt tries req's attempts in order; before is the name's image
// before the first reached the runtime.
func (p *Puller) attempt(ctx context.Context, req Request) (Result, presence, error) {
	attempts := req.Attempts
	if len(attempts) == 0 {
		attempts = []Attempt{{}}
	}
	secrets := authsOf(attempts)
	b := p.newBudget()
	var res Result
	var before presence
	var checked bool // before was asked for
	var pre []precheck
	var errs []error
	for i, a := range attempts {
		if req.Admit != nil {
			if err := req.Admit(); err != nil {
				errs = append(errs, err)
				break
			}
		}
		if !checked {
			before = p.presence(ctx, req.Spec)
			checked = true
			if before.img != nil {
				// Before the runtime is asked: each credential in order.
				var hit int
				var err error
				pre, hit, err = p.checkPresent(ctx, b, req.Spec.GetImage(), attempts, before.img)
				res.Contacted = b.asked
				if err != nil {
					return res, before, redacted(err, secrets)
				}
				if hit >= 0 {
					return Result{Ref: before.id, ID: before.id, Image: before.img, Credential: attempts[hit].recorded(), Contacted: true}, before, nil
				}
			}
		}
		var served string
		if pre != nil {
			if pre[i].refused != nil {
				errs = append(errs, redacted(pre[i].refused, secrets))
				continue
			}
			served = pre[i].served
		}
		res.Attempted, res.Contacted = true, true
		ref, err := p.images.PullImage(ctx, req.Spec, a.sent(), req.Sandbox)
		if err == nil {
			img := p.pulledImage(ctx, req.Spec, ref)
			if err = p.verify(ctx, b, req.Spec.GetImage(), criAuth(a.Credential.Auth), img, served); err == nil {
				id := ref
				if img.GetId() != "" {
					id = img.GetId()
				}
				return Result{Ref: ref, ID: id, Image: img, Credential: a.recorded(), Attempted: true, Contacted: true}, before, nil
			}
		}
		errs = append(errs, redacted(err, secrets))
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 1 {
		return res, before, errs[0]
	}
	return res, before, utilerrors.NewAggregate(errs)
}

// presence asks the runtime for the image under spec's name.
func (p *Puller) presence(ctx context.Context, spec *runtimeapi.ImageSpec) presence {
	resp, err := p.images.ImageStatus(ctx, spec, false)
	if err != nil {
		return presence{}
	}
	if resp.GetImage().GetId() == "" {
		return presence{known: true}
	}
	return presence{id: resp.GetImage().GetId(), img: resp.GetImage(), known: true}
}

// pulledImage returns the pulled image as the runtime's status reports it
// (its ID is the key of the records, its RepoDigests what the runtime
// resolved): asked by the ref the pull returned (which a concurrent pull
// of the same tag cannot move), else by name; nil if neither answers.
func (p *Puller) pulledImage(ctx context.Context, spec *runtimeapi.ImageSpec, ref string) *runtimeapi.Image {
	after, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterPullTimeout)
	defer cancel()
	for _, q := range []*runtimeapi.ImageSpec{{Image: ref, Annotations: spec.GetAnnotations(), RuntimeHandler: spec.GetRuntimeHandler()}, spec} {
		if q.GetImage() == "" {
			continue
		}
		resp, err := p.images.ImageStatus(after, q, false)
		if err == nil && resp.GetImage().GetId() != "" {
			return resp.GetImage()
		}
	}
	return nil
}

// failed resolves the intent of a failed pull that was not refused by the
// Verifier. If the runtime now holds an image under the name that it did
// not hold before the pull, the pull may have stored it with a tenant's
// credential: the name is recorded as pulled with no known credential
// (every pod verifies), never left to look preloaded. If that record
// cannot be written, the intent stays: the next start makes the same
// record from it, and so does a runtime that cannot say what it holds.
func (p *Puller) failed(ctx context.Context, logger klog.Logger, spec *runtimeapi.ImageSpec, attempted bool, before presence) {
	image := spec.GetImage()
	if attempted {
		after, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterPullTimeout)
		defer cancel()
		resp, err := p.images.ImageStatus(after, spec, false)
		id := resp.GetImage().GetId()
		switch {
		case err != nil:
			// Fail closed: the intent stays, so the name needs
			// verification, and the next start resolves it against
			// the runtime's images.
			logger.Error(err, "Could not ask the runtime whether a failed pull stored the image; its intent stays unresolved")
			return
		case id != "" && (!before.known || id != before.id):
			imp, ok := p.tracker.(credtracker.Importer)
			if !ok {
				logger.Info("The runtime stored the image of a failed pull and the tracker cannot record it; its intent stays unresolved", "imageRef", id)
				return
			}
			if err := imp.Import([]credtracker.ImportedPull{{Image: image, ImageRef: id}}, nil, ""); err != nil {
				logger.Error(err, "Failed to record the image a failed pull stored; its intent stays until the next start", "imageRef", id)
				return
			}
			logger.Info("The runtime stored the image although its pull failed; recorded as pulled with no known credential", "imageRef", id)
		}
	}
	if err := p.tracker.RecordImagePullFailed(image); err != nil {
		logger.Error(err, "Failed to resolve a pull intent; it will ask for verification after a restart")
	}
}

// log is the context's logger, else the Puller's.
func (p *Puller) log(ctx context.Context) klog.Logger {
	if l, err := logr.FromContext(ctx); err == nil {
		return l
	}
	return p.logger
}

// recorded is the credential a pull a succeeded with is recorded with.
func (a Attempt) recorded() credential.Credential {
	c := a.Credential
	if a.SourceOf != nil {
		c.Source = a.SourceOf()
	}
	return c
}

// sent is the AuthConfig the runtime is sent for a.
func (a Attempt) sent() *runtimeapi.AuthConfig {
	if a.Auth != nil {
		return a.Auth
	}
	return criAuth(a.Credential.Auth)
}

// criAuth converts credential fields for the CRI; nil for none.
// ServerAddress stays empty, as the kubelet leaves it: the keyring already
// chose the credential for this image's registry, and containerd 1.6
// parses a set ServerAddress as a URL, failing on "host:port" and dropping
// the credential for a bare host (found by the e2e suite against a real
// containerd).
func criAuth(a credential.AuthConfig) *runtimeapi.AuthConfig {
	if a.Empty() {
		return nil
	}
	return &runtimeapi.AuthConfig{
		Username:      a.Username,
		Password:      a.Password,
		Auth:          a.Auth,
		IdentityToken: a.IdentityToken,
		RegistryToken: a.RegistryToken,
	}
}
