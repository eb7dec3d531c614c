package podworkers

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// EventSourceComponent is the source component of the events pullguard
// records, where a kubelet would say "kubelet".
const EventSourceComponent = "pullguard"

// Event is one event as recorded on an object.
type Event struct {
	Object string `json:"object"` // namespace/name
	// FieldPath is the involved object's field, as the kubelet sets it for
	// a container ("spec.containers{app}", "spec.initContainers{init}"),
	// or "" for an event on the whole pod.
	FieldPath string    `json:"fieldPath,omitempty"`
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Message   string    `json:"message"`
	Time      time.Time `json:"time"`
	Source    Source    `json:"source"`
}

// Source is the component that recorded an event, and on which host.
type Source struct {
	Component string `json:"component"`
	Host      string `json:"host,omitempty"`
}

// EventLog is a record.EventRecorder that keeps every event, in order, for
// the command line to print: a node without an API server to send them to.
// A kubelet embedding pullguard passes its own recorder instead.
type EventLog struct {
	// Clock stamps events; nil means the real clock.
	Clock clock.PassiveClock
	// Host is the source host; "" leaves it out.
	Host string

	mu     sync.Mutex
	events []Event
}

var _ record.EventRecorderLogger = (*EventLog)(nil)

// Event implements record.EventRecorder.
func (l *EventLog) Event(obj runtime.Object, eventType, reason, message string) {
	ev := Event{Type: eventType, Reason: reason, Message: message, Source: Source{Component: EventSourceComponent, Host: l.Host}}
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		ev.Object, ev.FieldPath = ref.Namespace+"/"+ref.Name, ref.FieldPath
	} else if m, err := meta.Accessor(obj); err == nil {
		ev.Object = m.GetNamespace() + "/" + m.GetName()
	}
	if l.Clock != nil {
		ev.Time = l.Clock.Now()
	} else {
		ev.Time = time.Now()
	}
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}

// Eventf implements record.EventRecorder.
func (l *EventLog) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	l.Event(obj, eventType, reason, fmt.Sprintf(format, args...))
}

// AnnotatedEventf implements record.EventRecorder; annotations are dropped.
func (l *EventLog) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	l.Eventf(obj, eventType, reason, format, args...)
}

// WithLogger implements record.EventRecorderLogger.
func (l *EventLog) WithLogger(klog.Logger) record.EventRecorderLogger { return l }

// Events returns a copy of the events so far.
func (l *EventLog) Events() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...)
}
