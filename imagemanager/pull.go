package imagemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// errQPSExceeded is the kubelet's error for a pull over registryPullQPS.
var errQPSExceeded = errors.New("pull QPS exceeded")

// pull pulls image with the pod's credentials, in order, within a pull
// slot, through the guarded pull (intent, verification, record; a present
// image is checked with the registry before the runtime is asked).
func (m *Manager) pull(ctx context.Context, req Request, image string, c *podCredentials) (Result, error) {
	key := backOffKey(req.Pod, image)
	if m.backoff.IsInBackOffSinceUpdate(key, m.clock.Now()) {
		msg := m.event(req, corev1.EventTypeNormal, ReasonBackOff, "Back-off pulling image %q", image)
		return Result{Message: m.prevErr.backOffMessage(key, msg)}, ErrImagePullBackOff
	}
	m.prevErr.forget(key)
	// Secrets first (their warnings precede the pull, as in the kubelet).
	creds := c.get()
	m.event(req, corev1.EventTypeNormal, ReasonPulling, "Pulling image %q", image)

	start := m.clock.Now()
	res, waited, err := m.pullInSlot(ctx, req, image, creds)
	pullDuration.WithLabelValues(resultLabel(err)).Observe(m.clock.Since(start).Seconds())
	if err != nil {
		m.backoff.Next(key, m.clock.Now())
		m.prevErr.store(key, ErrImagePull, err)
		msg := m.event(req, corev1.EventTypeWarning, ReasonFailed, "Failed to pull image %q: %v", image, err)
		return Result{Pulled: res.Contacted, Message: msg}, ErrImagePull
	}
	m.backoff.Reset(key)
	m.logger.V(2).Info("Pulled image", "pod", podRef(req.Pod), "image", image, "imageRef", res.ID, "credential", res.Credential.Source.String())

	size := ""
	if res.Image != nil {
		size = fmt.Sprintf(" Image size: %d bytes.", res.Image.GetSize())
	}
	total := m.clock.Since(start)
	msg := m.event(req, corev1.EventTypeNormal, ReasonPulled, "Successfully pulled image %q in %v (%v including waiting).%s",
		image, (total - waited).Round(time.Millisecond), total.Round(time.Millisecond), size)
	return Result{ImageRef: res.ID, Pulled: true, Message: msg}, nil
}

// pullInSlot waits for a pull slot, then pulls with each credential in
// order (one anonymous attempt when there are none), each attempt within
// the registry QPS. It returns how long it waited for the slot.
func (m *Manager) pullInSlot(ctx context.Context, req Request, image string, creds []credential.Credential) (guardedpull.Result, time.Duration, error) {
	begin := m.clock.Now()
	release, err := m.acquire(ctx)
	if err != nil {
		return guardedpull.Result{}, 0, err
	}
	defer release()
	waited := m.clock.Since(begin)

	attempts := make([]guardedpull.Attempt, len(creds))
	for i, c := range creds {
		attempts[i] = guardedpull.Attempt{Credential: c}
	}
	res, err := m.puller.Pull(klog.NewContext(ctx, m.logger.WithValues("pod", podRef(req.Pod))), guardedpull.Request{
		Spec: &runtimeapi.ImageSpec{Image: image}, Sandbox: req.SandboxConfig, Attempts: attempts, Admit: m.admit,
	})
	return res, waited, err
}

// admit takes a registry QPS token for one pull attempt.
func (m *Manager) admit() error {
	if m.limiter != nil && !m.limiter.TryAccept() {
		return errQPSExceeded
	}
	return nil
}

// acquire takes a pull slot, or returns when ctx ends.
func (m *Manager) acquire(ctx context.Context) (func(), error) {
	if m.slots == nil {
		return func() {}, nil
	}
	select {
	case m.slots <- struct{}{}:
		return func() { <-m.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func backOffKey(pod *corev1.Pod, image string) string {
	if pod == nil {
		return "_" + image
	}
	return string(pod.UID) + "_" + image
}

func resultLabel(err error) string {
	if err != nil {
		return "failure"
	}
	return "success"
}
