package criproxy

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// ImageStatus reports a present image as absent when some pod could not
// use it without showing credentials, so that the kubelet calls PullImage
// with the pod's credentials, as for an absent image.
//
// The request names no pod, so the answer is the one for a pod that shows
// nothing: the tracker's decision for an IfNotPresent container with no
// credentials. "use" (node-accessible, preloaded under the policy, the
// gate off) reports the image as it is; anything else ("pull": pulled
// under this name with a tenant's credential, unknown origin, the policy
// requires verification, a pull of this name in flight, an image ID of an
// image the node pulled) reports it absent, with its verbose info too.
func (s *Server) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	defer observe("ImageStatus", time.Now())
	spec := req.GetImage()
	if spec.GetImage() == "" {
		return nil, invalid("ImageStatus: image is required")
	}
	resp, err := s.backend.ImageStatus(ctx, spec, req.GetVerbose())
	if err != nil {
		return nil, backendError("ImageStatus", err)
	}
	img := resp.GetImage()
	if img == nil {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	names := criruntime.ImageNames(img)
	d := s.tracker.Decide(credtracker.Request{
		Image:      spec.GetImage(),
		PullPolicy: corev1.PullIfNotPresent,
		ImageRef:   img.GetId(),
		Names:      names,
	})
	if d.Action == credtracker.UseImage {
		countDecision("ImageStatus", "present", d.Reason)
		if v := s.logger.V(2); v.Enabled() { // no arguments built when off
			v.Info("Image is free to every pod", "image", spec.GetImage(), "imageRef", img.GetId(), "reason", d.Reason)
		}
		return resp, nil
	}
	if s.hidden != nil {
		s.hidden.mark(spec.GetImage(), s.clock.Now(), img.GetId(), names)
	}
	countDecision("ImageStatus", "hidden", d.Reason)
	if v := s.logger.V(2); v.Enabled() {
		v.Info("Reporting a present image as absent: a pod must show credentials that pulled it, or pull it", "image", spec.GetImage(), "imageRef", img.GetId(), "reason", d.Reason)
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}
