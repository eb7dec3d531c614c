package criproxy

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// ImageStatus answers each kubelet call for what it is (see podCalls and
// docs/serve.md):
//
//   - A presence check of a pod (the kubelet's annotations, EnsureImageExists
//     and the size look-up after its pull): a present image that some pod
//     could not use without showing credentials is reported absent, unless
//     this pod's own pull of it proved a credential that the records still
//     grant it (decided again now). The kubelet then calls PullImage with
//     each of the pod's credentials, as for an absent image.
//   - A call with no annotation, once the kubelet has shown it annotates
//     its presence checks: a look-up that decides no pull (the container's
//     user, crictl inspecti), answered as the runtime answers.
//   - Any other call (a kubelet that sends no annotations, another client)
//     is a presence check of no particular pod.
//
// The decision is the tracker's for an IfNotPresent container that shows
// nothing. "use" (node-accessible, preloaded under the policy, the gate
// off) reports the image as it is; anything else (pulled under this name
// with a tenant's credential, unknown origin, the policy requires
// verification, a pull of this image in flight, an image ID of an image
// the node pulled) reports it absent, with its verbose info too.
func (s *Server) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	defer observe("ImageStatus", time.Now())
	spec := req.GetImage()
	if spec.GetImage() == "" {
		return nil, invalid("ImageStatus: image is required")
	}
	kind, pod := classify(spec)
	if kind == podCall {
		s.calls.annotating.Store(true)
	} else if kind == unkeyedCall || !s.calls.annotating.Load() {
		unannotatedChecks.Inc() // a presence check of no particular pod
	}
	resp, err := s.backend.ImageStatus(ctx, spec, req.GetVerbose())
	if err != nil {
		return nil, backendError("ImageStatus", err)
	}
	img := resp.GetImage()
	if img == nil {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if kind == bareCall && s.calls.annotating.Load() {
		countDecision("ImageStatus", "lookup", 0)
		return resp, nil
	}
	names := criruntime.ImageNames(img)
	req0 := credtracker.Request{Image: spec.GetImage(), PullPolicy: corev1.PullIfNotPresent, ImageRef: img.GetId(), Names: names}
	d := s.tracker.Decide(req0)
	if d.Action == credtracker.UseImage {
		countDecision("ImageStatus", "present", d.Reason)
		if v := s.logger.V(2); v.Enabled() { // no arguments built when off
			v.Info("Image is free to every pod", "image", spec.GetImage(), "imageRef", img.GetId(), "reason", d.Reason)
		}
		return resp, nil
	}
	// byID: the kubelet's look-up of an image volume's digest for the
	// pod's status (ImageVolumeWithDigest), by the image ID the pod's
	// pull got; no pull follows it.
	byID := kind == podCall && spec.GetImage() == img.GetId()
	held := false
	if kind == podCall {
		var proven credtracker.Decision
		if proven, held = s.decideByProof(req0, pod, byID); proven.Action == credtracker.UseImage {
			countDecision("ImageStatus", "proven", proven.Reason)
			if v := s.logger.V(2); v.Enabled() {
				v.Info("Image is present for this pod: its pull proved a credential the records grant it", "image", spec.GetImage(), "imageRef", img.GetId(), "reason", proven.Reason)
			}
			return resp, nil
		}
	} else {
		s.warnUnkeyed()
	}
	if !held && !byID {
		// A pod whose pull of the image succeeded gets no window: this
		// call is the size look-up right after that pull (on v1.32+ the
		// only ImageStatus of an Always container's pod) or a later
		// check its proof no longer passes, and a window would let the
		// pod's next Always pull be answered from a record. Its pulls
		// ask the registry. A look-up by ID opens none either: the
		// look-up of an image volume's digest is followed by no pull,
		// and a pull by ID is answered from no record (records are of
		// names).
		s.calls.hid(spec.GetImage(), pod, s.clock.Now(), img.GetId(), names)
	}
	countDecision("ImageStatus", "hidden", d.Reason)
	if v := s.logger.V(2); v.Enabled() {
		v.Info("Reporting a present image as absent: a pod must show credentials that pulled it, or pull it", "image", spec.GetImage(), "imageRef", img.GetId(), "reason", d.Reason)
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

// decideByProof decides req, a presence check of pod, again with the
// credential that pod's own pull of the image proved, under the name that
// pull used when the check is a look-up by the image's ID (byID): the
// records may still grant pod the image. d is the zero Decision when pod
// has no proof that may answer. held reports whether pod's pull of the
// image succeeded at all, whatever image it got.
func (s *Server) decideByProof(req credtracker.Request, pod string, byID bool) (d credtracker.Decision, held bool) {
	var cred credential.Credential
	var ok bool
	if byID {
		req.Image, cred, held, ok = s.calls.proofByID(pod, req.ImageRef)
	} else {
		cred, held, ok = s.calls.proofOf(req.Image, pod, req.ImageRef)
	}
	if !ok {
		return credtracker.Decision{}, held
	}
	if !cred.Hash.IsZero() {
		req.Credentials = func() []credential.Credential { return []credential.Credential{cred} }
	}
	return s.tracker.Decide(req), held
}

// warnUnkeyed says once, loudly, that presence checks arrive without the
// kubelet's pod annotations, so they are answered per image name, for no
// particular pod.
func (s *Server) warnUnkeyed() {
	s.unkeyedOnce.Do(func() {
		s.logger.Info("WARNING: an ImageStatus without the kubelet's pod annotations (kubernetes.io/config.source, kubernetes.io/config.seen) reported a present image absent; until a call with them arrives, such calls are taken for presence checks of no particular pod: the container's user is reported as root for a hidden image, and a pull after one is answered per image name (see docs/serve.md)")
	})
}
