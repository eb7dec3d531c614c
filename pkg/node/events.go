package node

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Event is one event as recorded on an object.
type Event struct {
	Object string `json:"object"` // namespace/name
	// FieldPath is the part of the object, such as spec.containers{app},
	// when the event was recorded on a reference to it.
	FieldPath string `json:"fieldPath,omitempty"`
	Type      string `json:"type"`
	Reason    string `json:"reason"`
	Message   string `json:"message"`
}

// EventLog is a record.EventRecorder that keeps every event, in order, for
// the command line to print: a node without an API server to send them to.
// A kubelet embedding pullguard passes its own recorder instead.
type EventLog struct {
	mu     sync.Mutex
	events []Event
}

var _ record.EventRecorderLogger = (*EventLog)(nil)

// Event implements record.EventRecorder.
func (l *EventLog) Event(obj runtime.Object, eventType, reason, message string) {
	ev := Event{Type: eventType, Reason: reason, Message: message}
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		ev.Object, ev.FieldPath = ref.Namespace+"/"+ref.Name, ref.FieldPath
	} else if m, err := meta.Accessor(obj); err == nil {
		ev.Object = m.GetNamespace() + "/" + m.GetName()
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
