package criproxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// Backend is the image service the proxy forwards to: k8s.io/cri-client's
// remote image service, pullguard's embedded runtime, or a test fake.
type Backend = criapi.ImageManagerService

// Server is the proxy's runtime.v1.ImageService. It is safe for
// concurrent use. Register it on a gRPC server with
// runtimeapi.RegisterImageServiceServer.
type Server struct {
	runtimeapi.UnimplementedImageServiceServer

	backend Backend
	tracker credtracker.Tracker
	hasher  *credential.Hasher
	logger  klog.Logger
	clock   clock.PassiveClock

	// inflight counts PullImage calls past their intent, so that Drain can
	// wait for them to resolve.
	inflight sync.WaitGroup
	mu       sync.Mutex
	draining bool

	// pruneEvery bounds how often a full ListImages prunes the records;
	// lastPrune is when it last did (Unix nanoseconds).
	pruneEvery time.Duration
	lastPrune  atomic.Int64

	calls       *podCalls
	window      time.Duration
	maxWindows  int // bounds podCalls (maxWindows; tests lower it)
	unkeyedOnce sync.Once
	// clockStep measures the wall clock's finest step (tests fake it).
	clockStep func() time.Duration

	// verifier checks a forwarded pull the backend reported done (nil: no
	// check; see WithManifestVerification).
	verifier      guardedpull.Verifier
	verifyTimeout time.Duration
	puller        *guardedpull.Puller

	// node gives the node's own credentials (nil: none known; see
	// WithNodeKeyring); nodeFailing is set while its look-ups fail.
	node        keyring.Keyring
	nodeTimeout time.Duration
	nodeFailing atomic.Bool
	// announced gives the credentials wrapped plugins handed the kubelet
	// (nil: none; see WithAnnouncedCredentials).
	announced AnnouncedCredentials
}

// DefaultPruneInterval is how often, at most, a full ListImages (the
// kubelet lists every few seconds) prunes the records of images that are
// gone, for images removed by something other than RemoveImage through the
// proxy (crictl on the runtime's socket, say).
const DefaultPruneInterval = time.Minute

var _ runtimeapi.ImageServiceServer = (*Server)(nil)

// Option sets an optional dependency of New.
type Option func(*Server)

// WithLogger sets the logger; decisions are logged at V(2).
func WithLogger(l klog.Logger) Option { return func(s *Server) { s.logger = l } }

// WithPruneInterval sets how often, at most, a full ListImages prunes
// the records (0: every time).
func WithPruneInterval(d time.Duration) Option { return func(s *Server) { s.pruneEvery = d } }

// WithAnswerWindow sets how long after a pod's presence check reported an
// image absent the pod's PullImage of it may be answered from a record
// (default DefaultAnswerWindow; see there). 0 answers every pull whose
// credential matches a record, Always pulls too.
func WithAnswerWindow(d time.Duration) Option { return func(s *Server) { s.window = d } }

// WithClock sets the clock used to time list-then-prune (tests use a
// fake one).
func WithClock(c clock.PassiveClock) Option { return func(s *Server) { s.clock = c } }

// WithManifestVerification checks every forwarded pull the backend reports
// as successful with v before the proxy accepts it ("no digest without
// bytes"; see guardedpull.WithVerifier, and guardedpull.RegistryVerifier
// that asks the registry). Use it with a backend that resolves a reference
// by trusting the registry's Docker-Content-Digest header, as containerd
// does. A failed check fails the pull with PermissionDenied, records
// nothing and leaves the pull's intent unresolved, so that the name needs
// verification (now, and after a restart). pullguard's embedded runtime
// GETs and hashes every manifest itself and needs no verifier. The check
// costs one manifest GET per forwarded successful pull; pulls answered
// from a record make none.
func WithManifestVerification(v guardedpull.Verifier) Option {
	return func(s *Server) { s.verifier = v }
}

// DefaultVerificationTimeout is how long, at most, serve's own requests to
// the registry for one PullImage may take, all of them together (the
// present image's check, the check after the backend's pull): well under
// the kubelet's runtimeRequestTimeout (2 minutes), and past it the pull
// fails with DeadlineExceeded.
const DefaultVerificationTimeout = criruntime.DefaultRegistryTimeout

// WithVerificationTimeout bounds serve's own requests to the registry for
// one PullImage, all of them together (default DefaultVerificationTimeout;
// see guardedpull.WithVerifyTimeout): the kubelet's PullImage has no
// deadline, and holds one of its pull slots while it waits.
func WithVerificationTimeout(d time.Duration) Option {
	return func(s *Server) { s.verifyTimeout = d }
}

// New returns a proxy that forwards to backend and decides with tracker.
// hasher must be the tracker's (credtracker.Enabled.Hasher); with the gate
// off, pass credtracker.Disabled() and any hasher: nothing is recorded.
func New(backend Backend, tracker credtracker.Tracker, hasher *credential.Hasher, opts ...Option) (*Server, error) {
	if backend == nil || tracker == nil || hasher == nil {
		return nil, errors.New("criproxy: backend, tracker and hasher are required")
	}
	s := &Server{backend: backend, tracker: tracker, hasher: hasher, logger: klog.Background(), clock: clock.RealClock{}, pruneEvery: DefaultPruneInterval, window: DefaultAnswerWindow,
		maxWindows: maxWindows, verifyTimeout: DefaultVerificationTimeout}
	for _, o := range opts {
		o(s)
	}
	s.calls = newPodCalls(s.window, s.maxWindows)
	s.calls.onEvict = func(kind string) { evictionsTotal.WithLabelValues(kind).Inc() }
	s.calls.onWindows = func(n int) { answerWindows.Set(float64(n)) }
	answerWindowsMax.Set(float64(s.maxWindows))
	s.logger = s.logger.WithName("criproxy")
	if s.clockStep == nil {
		s.clockStep = finestClockStep
	}
	if step := s.clockStep(); step > maxClockStep {
		s.calls.noProofs = true
		s.logger.Info("WARNING: the node's clock advances in steps of "+step.String()+", too coarse for the kubelet's kubernetes.io/config.seen to tell pods apart; a pod's presence checks are not answered from its earlier pull (each costs a pull, answered from the pod's record)", "clockStep", step, "finestNeeded", maxClockStep)
	}
	s.calls.onCollision = func() {
		s.logger.Info("WARNING: two pods' image calls carry the same kubernetes.io/config.source and kubernetes.io/config.seen (pulls of different sandboxes); or a pull carries them without a sandbox UID; presence checks with them are no longer answered from a pull")
	}
	puller, err := guardedpull.New(backend, tracker, guardedpull.WithVerifier(s.verifier), guardedpull.WithVerifyTimeout(s.verifyTimeout), guardedpull.WithLogger(s.logger))
	if err != nil {
		return nil, fmt.Errorf("criproxy: %w", err)
	}
	s.puller = puller
	return s, nil
}

// Drain stops admitting pulls (new ones get Unavailable) and waits until
// every pull already admitted has recorded its outcome or resolved its
// intent, or until ctx ends.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pulls still in flight: %w", ctx.Err())
	}
}

// admit registers one pull in flight, unless the server is draining.
func (s *Server) admit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *Server) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	defer observe("ListImages", time.Now())
	listedAt := s.clock.Now()
	imgs, err := s.backend.ListImages(ctx, req.GetFilter())
	if err != nil {
		return nil, backendError("ListImages", err)
	}
	if req.GetFilter().GetImage().GetImage() == "" {
		s.maybePrune(ctx, imgs, listedAt)
	}
	return &runtimeapi.ListImagesResponse{Images: imgs}, nil
}

// maybePrune prunes the records of images missing from a full list, at
// most once per pruneEvery (guardedpull.PruneList).
func (s *Server) maybePrune(ctx context.Context, imgs []*runtimeapi.Image, listedAt time.Time) {
	last := s.lastPrune.Load()
	if s.pruneEvery > 0 && listedAt.UnixNano()-last < int64(s.pruneEvery) {
		return
	}
	if !s.lastPrune.CompareAndSwap(last, listedAt.UnixNano()) {
		return // another list is pruning
	}
	if _, err := guardedpull.PruneList(klog.NewContext(ctx, s.logger), s.tracker, imgs, listedAt); err != nil {
		s.logger.Error(err, "Failed to prune the records of images that are gone")
	}
}

// streamChunk is how many images StreamImages sends per message.
const streamChunk = 100

// StreamImages lists through the backend's ListImages and streams the
// list in chunks (the kubelet's CRIListStreaming); the backend needs no
// support for streaming.
func (s *Server) StreamImages(req *runtimeapi.StreamImagesRequest, stream runtimeapi.ImageService_StreamImagesServer) error {
	defer observe("StreamImages", time.Now())
	imgs, err := s.backend.ListImages(stream.Context(), req.GetFilter())
	if err != nil {
		return backendError("StreamImages", err)
	}
	for len(imgs) > 0 {
		n := min(len(imgs), streamChunk)
		if err := stream.Send(&runtimeapi.StreamImagesResponse{Images: imgs[:n]}); err != nil {
			return err
		}
		imgs = imgs[n:]
	}
	return nil
}

func (s *Server) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	defer observe("ImageFsInfo", time.Now())
	resp, err := s.backend.ImageFsInfo(ctx)
	if err != nil {
		return nil, backendError("ImageFsInfo", err)
	}
	return resp, nil
}

// RemoveImage removes the image through the backend, then prunes that
// image's record, as the image manager does (image garbage collection;
// guardedpull.Remove), at a cost that does not depend on the number of
// images: a GC pass that removes k images costs k removals, not k
// listings. Only the backend's error fails it: a record whose removal
// could not be stored is logged (guardedpull.ErrPrune): the record of an
// absent image grants nothing, and the full prune (a ListImages, at most
// once per prune interval) removes it.
func (s *Server) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	defer observe("RemoveImage", time.Now())
	if req.GetImage().GetImage() == "" {
		return nil, invalid("RemoveImage: image is required")
	}
	if err := guardedpull.Remove(klog.NewContext(ctx, s.logger), s.backend, s.tracker, req.GetImage(), s.clock.Now()); err != nil {
		return nil, backendError("RemoveImage", err)
	}
	s.calls.forgetStatuses()
	return &runtimeapi.RemoveImageResponse{}, nil
}

// Prune lists the backend's images and removes the records of images no
// longer present (guardedpull.Prune); records written after the list was
// taken are kept.
func (s *Server) Prune(ctx context.Context) (int, error) {
	return guardedpull.Prune(klog.NewContext(ctx, s.logger), s.backend, s.tracker, s.clock)
}
