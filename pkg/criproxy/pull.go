package criproxy

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
	pgruntime "github.com/pullguard/pullguard/pkg/runtime"
)

// afterPullTimeout bounds the backend calls made after a pull ended (the
// image's ID, the check after a cancelled pull), which must run even when
// the caller's context is gone.
const afterPullTimeout = 30 * time.Second

// PullImage applies the decision to one of a pod's credentials.
//
// A credential whose keyed hash already pulled the present image under
// this name gets the image's ref at once, with no registry contact, when
// ImageStatus reported the image absent shortly before (the kubelet's
// IfNotPresent path; see DefaultAnswerWindow). Any
// other request (an anonymous one included) is forwarded: a durable pull
// intent first (if it cannot be written, nothing is pulled), then the
// backend's pull, which for a present image fetches only the manifest, so
// the registry decides. With WithManifestVerification, a success must then
// pass the check that the registry served the manifest bytes the backend
// resolved ("no digest without bytes"): a failure is PermissionDenied,
// records nothing and leaves the intent unresolved, so that the name needs
// verification. A success is recorded: an anonymous pull makes the
// image node-accessible under this name, a pull with a credential records
// its keyed hash (see recordSource). A failure resolves the intent and
// returns the backend's error as it is (the registry's 401 reaches the
// pod's events).
func (s *Server) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	defer observe("PullImage", time.Now())
	spec := req.GetImage()
	image := spec.GetImage()
	if image == "" {
		return nil, invalid("PullImage: image is required")
	}
	im, err := keyring.ParseImage(image)
	if err != nil {
		return nil, invalid("PullImage: image %q is not a valid image reference", truncate(image, 256))
	}
	if _, err := credtracker.RepositoryName(image); err != nil {
		return nil, invalid("PullImage: image %q is not a valid image reference", truncate(image, 256))
	}
	meta := req.GetSandboxConfig().GetMetadata()
	logger := s.logger.WithValues("image", image, "pod", klog.KRef(meta.GetNamespace(), meta.GetName()), "podUID", meta.GetUid())
	cred := criCredential(s.hasher, im.Registry, req.GetAuth())

	if !s.admit() {
		return nil, status.Error(codes.Unavailable, "pullguard is shutting down")
	}
	defer s.inflight.Done()

	if !cred.Anonymous() {
		if ref, ok := s.fromRecord(ctx, logger, spec, cred); ok {
			if s.hidden != nil {
				s.hidden.pulled(image, s.clock.Now())
			}
			return &runtimeapi.PullImageResponse{ImageRef: ref}, nil
		}
	}

	if s.hidden != nil {
		s.hidden.forget(image) // the pull may move the tag
	}
	if err := s.tracker.RecordPullIntent(image); err != nil {
		logger.Error(err, "Refusing to pull: the pull intent could not be recorded")
		countDecision("PullImage", "failed", 0)
		return nil, status.Errorf(codes.Unavailable, "pullguard could not record the pull of %q before pulling; not pulling", image)
	}
	ref, err := s.backend.PullImage(ctx, spec, req.GetAuth(), req.GetSandboxConfig())
	if err != nil {
		// The runtime's error may quote the registry's answer, which may
		// echo the credential it was sent: it is redacted before it is
		// logged or becomes the pod's event.
		err = redactedError(backendError("PullImage", err), req.GetAuth())
		s.pullFailed(ctx, logger, spec, err)
		return nil, err
	}
	after, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterPullTimeout)
	defer cancel()
	img := s.pulledImage(after, spec, ref)
	// The caller's context: a pull the kubelet gave up on fails its check
	// and stays unverified, which only asks for more verification.
	if digest, err := s.verifyPull(ctx, image, req.GetAuth(), img); err != nil {
		// The backend may now hold the name for content the registry never
		// served. The intent stays unresolved, as the image manager leaves
		// it: the name needs verification in this process (a pull in
		// flight) and after a restart (pulled with no known credential).
		msg := pgruntime.RedactAuth(err.Error(), req.GetAuth())
		countDecision("PullImage", "unverified", 0)
		logger.Info("Refusing the pull: the registry did not serve the manifest the runtime resolved; nothing is recorded and the name requires verification", "err", msg)
		return nil, unverifiedError(image, req.GetAuth(), err)
	} else if digest != "" {
		logger.V(3).Info("Verified the registry served the manifest", "digest", digest)
	}
	id := ref
	if img.GetId() != "" {
		id = img.GetId()
	}
	rec := cred
	src := "anonymous"
	if !cred.Anonymous() {
		rec.Source = recordSource(meta.GetNamespace(), cred.Hash)
		src = rec.Source.String()
	}
	if err := s.tracker.RecordImagePulled(image, id, rec); err != nil {
		logger.Error(err, "The pull succeeded but its record may not survive a restart")
	}
	if s.hidden != nil {
		s.hidden.pulled(image, s.clock.Now())
	}
	countDecision("PullImage", "forwarded", 0)
	logger.V(2).Info("Pulled through the runtime and recorded the credential", "imageRef", id, "credential", src)
	return &runtimeapi.PullImageResponse{ImageRef: ref}, nil
}

// fromRecord answers a pull from the records when cred's keyed hash
// already pulled the present image under this name.
func (s *Server) fromRecord(ctx context.Context, logger klog.Logger, spec *runtimeapi.ImageSpec, cred credential.Credential) (string, bool) {
	var id string
	var names []string
	if s.hidden != nil {
		var ok bool
		ok, id, names = s.hidden.recent(spec.GetImage(), s.clock.Now())
		if !ok {
			logger.V(2).Info("Forwarding the pull: no ImageStatus reported the image absent before it, so the kubelet pulls it with policy Always")
			return "", false
		}
	}
	if id == "" {
		resp, err := s.backend.ImageStatus(ctx, spec, false)
		if err != nil || resp.GetImage() == nil {
			// Absent, or unknown: the pull decides.
			return "", false
		}
		id, names = resp.GetImage().GetId(), pgruntime.ImageNames(resp.GetImage())
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

// pullFailed resolves the intent of a failed pull. When the pull ended
// because its context did (the kubelet gave up), the runtime may still
// have stored the image: if it is present under this name now, the node
// may have pulled it with a tenant's credential, so the name is recorded
// as pulled with no known credential (every pod verifies), never left to
// look preloaded.
func (s *Server) pullFailed(ctx context.Context, logger klog.Logger, spec *runtimeapi.ImageSpec, pullErr error) {
	image := spec.GetImage()
	if ctx.Err() != nil {
		after, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterPullTimeout)
		defer cancel()
		if resp, err := s.backend.ImageStatus(after, spec, false); err == nil && resp.GetImage() != nil {
			if imp, ok := s.tracker.(credtracker.Importer); ok {
				if err := imp.Import([]credtracker.ImportedPull{{Image: image, ImageRef: resp.GetImage().GetId()}}, nil, ""); err != nil {
					logger.Error(err, "Failed to record an interrupted pull; its intent stays until the next start")
					return
				}
			}
		}
	}
	if err := s.tracker.RecordImagePullFailed(image); err != nil {
		logger.Error(err, "Failed to resolve the pull intent")
	}
	countDecision("PullImage", "failed", 0)
	logger.V(2).Info("The runtime's pull failed", "err", pullErr.Error())
}

// pulledImage returns the pulled image as ImageStatus reports it (its ID
// is the key of the records, its RepoDigests what the backend resolved):
// asked by the ref the pull returned (which a concurrent pull of the same
// tag cannot move), else by name; nil if neither answers.
func (s *Server) pulledImage(ctx context.Context, spec *runtimeapi.ImageSpec, ref string) *runtimeapi.Image {
	for _, q := range []*runtimeapi.ImageSpec{{Image: ref, Annotations: spec.GetAnnotations(), RuntimeHandler: spec.GetRuntimeHandler()}, spec} {
		if q.GetImage() == "" {
			continue
		}
		resp, err := s.backend.ImageStatus(ctx, q, false)
		if err == nil && resp.GetImage().GetId() != "" {
			return resp.GetImage()
		}
	}
	return nil
}
