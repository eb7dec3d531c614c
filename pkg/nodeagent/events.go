package nodeagent

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/internal/leak"
)

// The reasons of a Status, and of the Events the agent records on its Pod.
const (
	// ReasonStarting: the agent has not finished its work yet.
	ReasonStarting = "Starting"
	// ReasonWaiting: another node holds the Lease; this one waits.
	ReasonWaiting = "WaitingForLease"
	// ReasonInstalled: installed, the kubelet restarted onto serve, doctor
	// passes.
	ReasonInstalled = "Installed"
	// ReasonServeUpdated: only serve's files changed (a new binary):
	// serve restarted, the kubelet did not, doctor passes.
	ReasonServeUpdated = "ServeUpdated"
	// ReasonUpToDate: the node already had everything; doctor passes.
	ReasonUpToDate = "UpToDate"
	// ReasonRefused: install refused the kubelet's configuration (file
	// and line): nothing was written.
	ReasonRefused = "InstallRefused"
	// ReasonRolledBack: doctor did not pass after the install: the node
	// was given back as it was before pullguard.
	ReasonRolledBack = "RolledBack"
	// ReasonDoctorFailed: the node, unchanged by this agent, does not
	// pass doctor.
	ReasonDoctorFailed = "DoctorFailed"
	// ReasonFailed: the install or its give-back failed (the message says
	// what to do).
	ReasonFailed = "InstallFailed"
	// ReasonUninstalled, ReasonNotInstalled, ReasonUninstallFailed: the
	// uninstall mode's outcomes.
	ReasonUninstalled     = "Uninstalled"
	ReasonNotInstalled    = "NothingToUninstall"
	ReasonUninstallFailed = "UninstallFailed"
	// ReasonHalted: too many nodes failed; the rollout waits for an
	// operator (Lease.MaxFailed).
	ReasonHalted = "RolloutHalted"
)

// Component is the Events' source and reporting controller.
const Component = "pullguard-node-agent"

// maxEventMessage bounds an Event's message (events.k8s.io's limit).
const maxEventMessage = 1024

// PodRef names the agent's own Pod (the downward API's POD_NAME,
// POD_NAMESPACE, POD_UID) and its node.
type PodRef struct {
	Namespace, Name, Node string
	UID                   types.UID
}

// Reporter says what the agent did: the status file (the readiness probe
// reads it), a log line, and an Event on the agent's Pod. Every text
// has Secrets redacted.
type Reporter struct {
	StatusFile string
	// Client records the Events (a clientset's CoreV1()); nil records
	// none.
	Client corev1client.EventsGetter
	Pod    PodRef
	Clock  clock.Clock
	// Secrets are redacted from every message (serve's token).
	Secrets []string
	// Timeout bounds the Event's request (10s when 0).
	Timeout time.Duration
	// seq keeps apart the names of Events made at the same instant.
	seq atomic.Uint64
}

// Report writes s to the status file and records it; an Event that
// cannot be recorded is logged, not an error. A reason of ReasonStarting
// records no Event.
func (r *Reporter) Report(ctx context.Context, s Status) error {
	s.Message = leak.Redact(s.Message, r.Secrets...)
	if s.Ready {
		klog.InfoS("node agent", "node", r.Pod.Node, "ready", true, "reason", s.Reason, "message", s.Message)
	} else {
		klog.InfoS("node agent: not ready", "node", r.Pod.Node, "reason", s.Reason, "message", s.Message)
	}
	if err := WriteStatus(r.StatusFile, s); err != nil {
		return err
	}
	if s.Reason != ReasonStarting {
		if err := r.event(ctx, s); err != nil {
			klog.ErrorS(err, "recording the event on the agent's pod", "pod", klog.KRef(r.Pod.Namespace, r.Pod.Name), "reason", s.Reason)
		}
	}
	return nil
}

func (r *Reporter) event(ctx context.Context, s Status) error {
	if r.Client == nil || r.Pod.Name == "" {
		return nil
	}
	c := r.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	// The give-back of a stopped agent still says so.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	now := c.Now()
	kind := corev1.EventTypeNormal
	if !s.Ready && s.Reason != ReasonWaiting {
		kind = corev1.EventTypeWarning
	}
	msg := s.Message
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage-3] + "..."
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x%x", r.Pod.Name, now.UnixNano(), r.seq.Add(1)),
			Namespace: r.Pod.Namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: r.Pod.Namespace, Name: r.Pod.Name, UID: r.Pod.UID,
		},
		Reason:              s.Reason,
		Message:             msg,
		Type:                kind,
		Source:              corev1.EventSource{Component: Component, Host: r.Pod.Node},
		FirstTimestamp:      metav1.NewTime(now),
		LastTimestamp:       metav1.NewTime(now),
		Count:               1,
		ReportingController: "pullguard.dev/node-agent",
		ReportingInstance:   Component + "-" + r.Pod.Node,
	}
	_, err := r.Client.Events(r.Pod.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}
