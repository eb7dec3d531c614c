package imagemanager

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/reference"
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

// event records one event on the request's container and logs it; it
// returns the message, which callers also return in Result.Message.
func (m *Manager) event(req Request, eventType, reason, format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	if obj := eventObject(req); obj != nil {
		m.recorder.Event(obj, eventType, reason, msg)
	}
	// The event is the audit trail; the log has it at verbosity 2 (Warning)
	// and 3 (Normal).
	v := 3
	if eventType == corev1.EventTypeWarning {
		v = 2
	}
	m.logger.V(v).Info(msg, "pod", podRef(req.Pod), "container", req.Container, "image", req.Image, "reason", reason, "type", eventType)
	return msg
}

// eventObject is what the kubelet records image events on: a reference to
// the pod with the container's field path (spec.containers{name} or
// spec.initContainers{name}), made by client-go's tools/reference. Without
// a container name the pod itself is used.
func eventObject(req Request) runtime.Object {
	if req.Pod == nil {
		return nil
	}
	if req.Container == "" {
		return req.Pod
	}
	ref, err := reference.GetPartialReference(scheme.Scheme, req.Pod, FieldPath(req.Container, req.InitContainer))
	if err != nil {
		return req.Pod
	}
	return ref
}

// FieldPath is the kubelet's field path of a container in its pod.
func FieldPath(container string, init bool) string {
	if init {
		return fmt.Sprintf("spec.initContainers{%s}", container)
	}
	return fmt.Sprintf("spec.containers{%s}", container)
}

// pullErrors remembers, by back-off key, the last pull failure, for the
// message of the BackOff that follows it (the kubelet's prevPullErrMsg).
type pullErrors struct{ m sync.Map }

func (p *pullErrors) store(key string, category error, err error) {
	p.m.Store(key, fmt.Sprintf("%s: %v", category, err))
}

func (p *pullErrors) forget(key string) { p.m.Delete(key) }

// backOffMessage is the kubelet's waiting message during a back-off: the
// event's text, then the previous failure when one is known.
func (p *pullErrors) backOffMessage(key, event string) string {
	if prev, ok := p.m.Load(key); ok {
		return event + ": " + prev.(string)
	}
	return event
}

func podRef(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return p.Namespace + "/" + p.Name
}
