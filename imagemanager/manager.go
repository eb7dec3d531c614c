package imagemanager

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/credentialprovider"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/imageref"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// ImageService is the CRI image service the manager pulls through: a real
// runtime over gRPC or pullguard's embedded one.
type ImageService = internalapi.ImageManagerService

// CredentialProviders gives the keyring of exec credential provider
// plugins for one pod; *credentialprovider.Manager implements it.
type CredentialProviders interface {
	ForPod(credentialprovider.PodInfo) keyring.Keyring
}

// The kubelet's defaults.
const (
	DefaultBackOffInitial = 10 * time.Second
	DefaultBackOffMax     = 300 * time.Second
	DefaultRegistryQPS    = 5
	DefaultRegistryBurst  = 10
)

// Manager ensures images for containers. It is safe for concurrent use:
// pods are driven concurrently, as by the kubelet's pod workers.
type Manager struct {
	images      ImageService
	tracker     credtracker.Tracker
	recorder    record.EventRecorder
	hasher      *credential.Hasher
	nodeKeyring keyring.Keyring
	providers   CredentialProviders
	clock       clock.Clock
	logger      klog.Logger

	backoff *flowcontrol.Backoff
	prevErr pullErrors              // the last pull failure by back-off key
	slots   chan struct{}           // pull slots; nil means unlimited
	limiter flowcontrol.RateLimiter // registry QPS; nil means unlimited
	puller  *guardedpull.Puller     // intent, pull, verification, record

	verifier guardedpull.Verifier // checks a runtime's pull; nil means none

	// options, applied in New
	serialize          bool
	maxParallel        int32
	qps                float32
	burst              int
	backoffInit, bkMax time.Duration
}

// Option sets an optional dependency or setting of New.
type Option func(*Manager)

// WithNodeKeyring sets the node's docker config keyring.
func WithNodeKeyring(kr keyring.Keyring) Option { return func(m *Manager) { m.nodeKeyring = kr } }

// WithCredentialProviders sets the exec credential provider plugins.
func WithCredentialProviders(p CredentialProviders) Option {
	return func(m *Manager) { m.providers = p }
}

// WithHasher sets the credential hasher. By default the tracker's is used
// (an enabled tracker has one); with a disabled tracker hashes are never
// compared and a throwaway key is used.
func WithHasher(h *credential.Hasher) Option { return func(m *Manager) { m.hasher = h } }

// WithClock sets the clock for back-off, rate limiting and durations.
func WithClock(c clock.Clock) Option { return func(m *Manager) { m.clock = c } }

// WithLogger sets the logger.
func WithLogger(l klog.Logger) Option { return func(m *Manager) { m.logger = l } }

// WithBackOff sets the per pod and image pull back-off (the kubelet's is
// 10s doubling to 300s).
func WithBackOff(initial, max time.Duration) Option {
	return func(m *Manager) { m.backoffInit, m.bkMax = initial, max }
}

// WithSerializedPulls pulls one image at a time (the kubelet's
// serializeImagePulls, true by default). Off, pulls run in parallel up to
// WithMaxParallelImagePulls.
func WithSerializedPulls(serialize bool) Option { return func(m *Manager) { m.serialize = serialize } }

// WithMaxParallelImagePulls bounds parallel pulls when they are not
// serialized (the kubelet's maxParallelImagePulls; 0 means no bound).
func WithMaxParallelImagePulls(n int32) Option { return func(m *Manager) { m.maxParallel = n } }

// WithManifestVerification checks every pull the runtime reports done
// with v before the manager accepts it (see guardedpull.WithVerifier;
// guardedpull.RegistryVerifier asks the registry). Use it with a runtime
// that resolves a reference by trusting the registry's
// Docker-Content-Digest header (containerd does); the embedded runtime
// checks the bytes itself and needs none. A failed check fails that
// credential's pull: nothing is recorded and the name needs verification.
func WithManifestVerification(v guardedpull.Verifier) Option {
	return func(m *Manager) { m.verifier = v }
}

// WithRegistryQPS limits pulls per second with a token bucket (the
// kubelet's registryPullQPS and registryBurst; qps 0 means no limit). A
// pull over the limit fails at once with "pull QPS exceeded", as in the
// kubelet.
func WithRegistryQPS(qps float32, burst int) Option {
	return func(m *Manager) { m.qps, m.burst = qps, burst }
}

// New returns a Manager that pulls through images, decides with tracker
// (credtracker.Disabled() when the KubeletEnsureSecretPulledImages gate is
// off) and records events with recorder.
func New(images ImageService, tracker credtracker.Tracker, recorder record.EventRecorder, opts ...Option) (*Manager, error) {
	if images == nil || tracker == nil || recorder == nil {
		return nil, fmt.Errorf("image manager: an image service, a tracker and an event recorder are required")
	}
	m := &Manager{
		images: images, tracker: tracker, recorder: recorder,
		clock: clock.RealClock{}, logger: klog.Background(),
		serialize: true, qps: DefaultRegistryQPS, burst: DefaultRegistryBurst,
		backoffInit: DefaultBackOffInitial, bkMax: DefaultBackOffMax,
	}
	for _, o := range opts {
		o(m)
	}
	m.logger = m.logger.WithName("imagemanager")
	if m.hasher == nil {
		if h, ok := tracker.(interface{ Hasher() *credential.Hasher }); ok {
			m.hasher = h.Hasher()
		} else {
			h, err := credential.NewRandomHasher()
			if err != nil {
				return nil, fmt.Errorf("image manager: %w", err)
			}
			m.hasher = h
		}
	}
	if m.maxParallel < 0 || m.qps < 0 || m.burst < 0 {
		return nil, fmt.Errorf("image manager: maxParallelImagePulls, registryPullQPS and registryBurst must not be negative")
	}
	switch {
	case m.serialize:
		m.slots = make(chan struct{}, 1)
	case m.maxParallel > 0:
		m.slots = make(chan struct{}, m.maxParallel)
	}
	if m.qps > 0 {
		if m.burst == 0 {
			return nil, fmt.Errorf("image manager: registryBurst must be positive when registryPullQPS is set")
		}
		m.limiter = flowcontrol.NewTokenBucketRateLimiterWithClock(m.qps, m.burst, m.clock)
	}
	m.backoff = flowcontrol.NewFakeBackOff(m.backoffInit, m.bkMax, m.clock)
	puller, err := guardedpull.New(images, tracker, guardedpull.WithVerifier(m.verifier), guardedpull.WithLogger(m.logger))
	if err != nil {
		return nil, fmt.Errorf("image manager: %w", err)
	}
	m.puller = puller
	return m, nil
}

// EnsureImageExists makes sure req's image is present and that req's pod
// may use it, and returns the image ref to run. On failure the error is one
// of ErrImagePull, ErrImageNeverPull, ErrImagePullBackOff,
// ErrInvalidImageName or ErrImageInspect, and Result.Message says why.
// Every outcome is also recorded as an event on the pod.
func (m *Manager) EnsureImageExists(ctx context.Context, req Request) (Result, error) {
	image, err := applyDefaultTag(req.Image)
	if err != nil {
		msg := m.event(req, corev1.EventTypeWarning, ReasonInspectFailed, "Failed to apply default image tag %q: %v", req.Image, err)
		return Result{Message: msg}, ErrInvalidImageName
	}
	status, err := m.images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
	if err != nil {
		msg := m.event(req, corev1.EventTypeWarning, ReasonInspectFailed, "Failed to inspect image %q: %v", image, err)
		return Result{Message: msg}, ErrImageInspect
	}
	ref := status.GetImage().GetId()
	names := criruntime.ImageNames(status.GetImage())

	c := &podCredentials{m: m, ctx: ctx, req: req, image: image}
	d := m.tracker.Decide(credtracker.Request{Image: image, PullPolicy: req.PullPolicy, ImageRef: ref, Names: names, Credentials: c.get})
	countEnsure(req.PullPolicy, ref != "", d)
	if v := m.logger.V(2); v.Enabled() {
		v.Info("Decided", "pod", podRef(req.Pod), "image", image, "imageRef", ref, "pullPolicy", req.PullPolicy, "action", d.Action.String(), "reason", d.Reason.String())
	}

	switch d.Action {
	case credtracker.UseImage:
		msg := m.event(req, corev1.EventTypeNormal, ReasonPulled, "%s", presentMessage(image, d))
		return Result{ImageRef: ref, Message: msg, Decision: d}, nil
	case credtracker.FailNeverPull:
		msg := m.event(req, corev1.EventTypeWarning, ReasonErrImageNeverPull, "Container image %q is not present with pull policy of Never", image)
		return Result{Message: msg, Decision: d}, ErrImageNeverPull
	default:
		// The guarded pull asks the registry for a present image's
		// manifest first: its answer may stand for the pull.
		res, err := m.pull(ctx, req, image, c)
		res.Decision = d
		return res, err
	}
}

func presentMessage(image string, d credtracker.Decision) string {
	if d.Reason == credtracker.ReasonFeatureDisabled {
		return fmt.Sprintf("Container image %q already present on machine", image)
	}
	return fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", image)
}

// applyDefaultTag checks the reference with the kubelet's grammar and adds
// ":latest" when it has neither tag nor digest, as the kubelet does. The
// error says what the kubelet says ("couldn't parse image name ...").
func applyDefaultTag(image string) (string, error) {
	ref, err := imageref.Parse(image)
	if err != nil {
		return "", err
	}
	if ref.Tag == "" && ref.Digest == "" {
		return image + ":latest", nil
	}
	return image, nil
}
