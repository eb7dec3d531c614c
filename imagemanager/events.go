package imagemanager

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Event reasons, with the kubelet's names.
const (
	ReasonPulling              = "Pulling"
	ReasonPulled               = "Pulled"
	ReasonFailed               = "Failed"
	ReasonBackOff              = "BackOff"
	ReasonErrImageNeverPull    = "ErrImageNeverPull"
	ReasonInspectFailed        = "InspectFailed"
	ReasonFailedToRetrieveAuth = "FailedToRetrieveImagePullSecret"
)

// event records one event on the request's pod and logs it; it returns the
// message, which callers also return in Result.Message.
func (m *Manager) event(req Request, eventType, reason, format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	if req.Pod != nil {
		m.recorder.Event(req.Pod, eventType, reason, msg)
	}
	// The event is the audit trail; the log has it at verbosity 2 (Warning)
	// and 3 (Normal).
	v := 3
	if eventType == corev1.EventTypeWarning {
		v = 2
	}
	m.logger.V(v).Info(msg, "pod", podRef(req.Pod), "image", req.Image, "reason", reason, "type", eventType)
	return msg
}

func podRef(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return p.Namespace + "/" + p.Name
}
