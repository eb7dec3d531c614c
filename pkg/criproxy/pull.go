package criproxy

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// PullImage applies the decision to one of a pod's credentials.
//
// A credential whose keyed hash already pulled the present image under
// this name gets the image's ref at once, with no registry contact, when
// this pod's presence check reported the image absent just before (the
// kubelet's IfNotPresent path; it asks nothing before an Always pull; see
// podCalls and DefaultAnswerWindow). Any other request (an anonymous one
// included) is forwarded through the guarded pull (package guardedpull,
// the image manager's too): a durable pull intent first (if it cannot be
// written, nothing is pulled: Unavailable), then, for an image present
// under the name (the IfNotPresent path, or an Always pull of a present
// image), the registry is asked for that image's manifest with the pull's
// credential: bytes of its digest are the pull's proof, recorded and
// answered with the present image's ID, without the backend's pull; a
// refusal (401, 403; 404) is the pull's answer (Unknown, NotFound, as
// containerd answers them), without the backend's pull, which would be refused the same;
// other bytes (a moved tag) go to the backend's pull, which for a present
// image fetches only the manifest. An absent image goes to the backend's
// pull. With WithManifestVerification, a success must then pass the check
// that the registry served the manifest bytes the backend resolved ("no
// digest without bytes"): a failure is PermissionDenied, records nothing
// and leaves the intent unresolved, so that the name needs verification.
// serve's own requests to the registry for one pull share one time limit
// (WithVerificationTimeout): past it the pull fails with DeadlineExceeded,
// naming the registry, so that a stalling registry never holds one of the
// kubelet's pull slots longer. A success is recorded: an anonymous pull,
// or one with a node credential (WithNodeKeyring), makes the image
// node-accessible under this name, a pull with any other credential
// records its keyed hash (see recordSource). A failure returns the
// backend's error with its code and without the credential (the
// registry's 401 reaches the pod's events); if the backend stored an
// image under the name although the pull failed or the kubelet gave up on
// it, the name is recorded as pulled with no known credential (every pod
// verifies). A success, answered or forwarded, is the pod's proof for its
// later presence checks of the image.
func (s *Server) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	defer observe("PullImage", time.Now())
	spec := req.GetImage()
	image := spec.GetImage()
	if image == "" {
		return nil, invalid("PullImage: image is required")
	}
	im, err := keyring.ParseImage(image) // pkg/imageref's grammar, as the tracker's and the call keys' (normalizedKey)
	if err != nil {
		return nil, invalid("PullImage: image %q is not a valid image reference", truncate(image, 256))
	}
	meta := req.GetSandboxConfig().GetMetadata()
	podLogger := s.logger.WithValues("pod", klog.KRef(meta.GetNamespace(), meta.GetName()), "podUID", meta.GetUid())
	logger := podLogger.WithValues("image", image)
	cred := credential.CRICredential(s.hasher, im.Registry, req.GetAuth())
	kind, podKey := classify(spec)
	if kind == podCall {
		s.calls.annotating.Store(true)
	}

	if !s.admit() {
		return nil, status.Error(codes.Unavailable, "pullguard is shutting down")
	}
	defer s.inflight.Done()

	// hidden: this pod's presence check reported the image absent just
	// before (the kubelet's IfNotPresent path), not an Always pull.
	hidden, id, names := s.calls.take(image, podKey, s.clock.Now())
	if !hidden {
		logger.V(2).Info("Forwarding the pull: no presence check of this pod reported the image absent before it, so the kubelet pulls it with policy Always")
	} else if !cred.Anonymous() {
		if ref, ok := s.fromRecord(ctx, logger, spec, cred, id, names); ok {
			s.calls.proved(image, podKey, meta.GetUid(), ref, cred)
			return &runtimeapi.PullImageResponse{ImageRef: ref}, nil
		}
	}

	s.calls.forget(image) // the pull may move the tag
	rec := cred
	if !cred.Anonymous() {
		rec.Source = recordSource(meta.GetNamespace(), cred.Hash)
	}
	// Whether the credential is the node's is asked beside the pull, and
	// waited for only when the pull succeeded.
	node := s.startNodeSource(ctx, logger, image, im, cred)
	res, err := s.puller.Pull(klog.NewContext(ctx, podLogger), guardedpull.Request{
		Spec: spec, Sandbox: req.GetSandboxConfig(), Attempts: []guardedpull.Attempt{{
			Auth: req.GetAuth(), Credential: rec,
			SourceOf: func() credential.Source {
				if src, ok := node(); ok {
					return src
				}
				return rec.Source
			},
		}},
	})
	if err != nil {
		return nil, pullFailure(ctx, logger, image, err)
	}
	s.calls.proved(image, podKey, meta.GetUid(), res.ID, cred)
	if !res.Attempted {
		countDecision("PullImage", "verified", 0)
		logger.V(2).Info("The registry served the present image's manifest to the credential; recorded, without the runtime's pull", "imageRef", res.ID, "credential", res.Credential.Source.String())
		return &runtimeapi.PullImageResponse{ImageRef: res.Ref}, nil
	}
	countDecision("PullImage", "forwarded", 0)
	logger.V(2).Info("Pulled through the runtime and recorded the credential", "imageRef", res.ID, "credential", res.Credential.Source.String())
	return &runtimeapi.PullImageResponse{ImageRef: res.Ref}, nil
}

// pullFailure is the answer to a pull that failed with err, its decision
// counted: Unavailable when the pull intent could not be recorded; the
// backend's error when the kubelet gave up (ctx ended); the registry's
// refusal of serve's manifest GET as containerd answers it (Unknown,
// NotFound for a missing manifest); DeadlineExceeded when serve's own
// requests ran out of time; PermissionDenied when the registry did not
// serve the manifest the runtime resolved; else the backend's error with
// its code. None holds the credential.
func pullFailure(ctx context.Context, logger klog.Logger, image string, err error) error {
	switch {
	case errors.Is(err, guardedpull.ErrNoIntent):
		logger.Error(err, "Refusing to pull: the pull intent could not be recorded")
		countDecision("PullImage", "failed", 0)
		return status.Errorf(codes.Unavailable, "pullguard could not record the pull of %q before pulling; not pulling", image)
	case ctx.Err() != nil:
		// The kubelet gave up on the pull (the pod went away), whichever
		// step it was at, serve's own checks included: the caller's
		// code (Canceled), not a check's verdict.
		countDecision("PullImage", "failed", 0)
		return backendError("PullImage", err)
	case errors.Is(err, guardedpull.ErrRefused):
		// The registry's own answer to serve's manifest GET, given for
		// the runtime's pull, which it would refuse the same. The error
		// holds no credential.
		countDecision("PullImage", "refused", 0)
		code := codes.Unknown // as containerd answers a pull the registry refused
		if errors.Is(err, criruntime.ErrNotFound) {
			code = codes.NotFound
		}
		return status.Errorf(code, "failed to pull image %q: %v", image, err)
	case errors.Is(err, context.DeadlineExceeded):
		// serve's own verification ran out of time (the kubelet's pull
		// has no deadline of its own): a registry that stalls gets its
		// pod this error, never a held pull slot.
		countDecision("PullImage", "timeout", 0)
		return status.Errorf(codes.DeadlineExceeded, "failed to pull image %q: %v", image, err)
	case errors.Is(err, guardedpull.ErrUnverified):
		// The backend may now hold the name for content the registry
		// never served: nothing is recorded and the name requires
		// verification. The error holds no credential.
		countDecision("PullImage", "unverified", 0)
		return status.Errorf(codes.PermissionDenied, "pullguard: the registry did not serve the manifest of %q that the runtime resolved, so the pull is not accepted: %v", image, err)
	default:
		// The runtime's error, with every form of the credential removed
		// (it may quote a registry that echoed it), keeps its code: the
		// registry's 401 reaches the pod's events.
		countDecision("PullImage", "failed", 0)
		return backendError("PullImage", err)
	}
}

// fromRecord answers a pull that follows its pod's presence check from
// the records when cred's keyed hash already pulled the present image
// under this name; id and names are the status behind that check's
// answer, if still fresh (else id is "" and the runtime is asked).
func (s *Server) fromRecord(ctx context.Context, logger klog.Logger, spec *runtimeapi.ImageSpec, cred credential.Credential, id string, names []string) (string, bool) {
	if id == "" {
		resp, err := s.backend.ImageStatus(ctx, spec, false)
		if err != nil || resp.GetImage() == nil {
			// Absent, or unknown: the pull decides.
			return "", false
		}
		id, names = resp.GetImage().GetId(), criruntime.ImageNames(resp.GetImage())
	}
	d := s.tracker.Decide(credtracker.Request{
		Image:       spec.GetImage(),
		PullPolicy:  corev1.PullIfNotPresent,
		ImageRef:    id,
		Names:       names,
		Credentials: func() []credential.Credential { return []credential.Credential{cred} },
	})
	if d.Action != credtracker.UseImage || d.Reason != credtracker.ReasonCredentialMatch {
		logger.V(2).Info("Forwarding the pull: the registry decides", "imageRef", id, "reason", d.Reason)
		return "", false
	}
	countDecision("PullImage", "answered", d.Reason)
	logger.V(2).Info("Answered the pull from the records, with no registry contact", "imageRef", id, "reason", d.Reason)
	return id, true
}
