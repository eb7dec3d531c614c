package imagemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/credential"
)

// errQPSExceeded is the kubelet's error for a pull over registryPullQPS.
var errQPSExceeded = errors.New("pull QPS exceeded")

// pull pulls image with the pod's credentials, in order, recording the
// intent before and the outcome after.
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

	if err := m.tracker.RecordPullIntent(image); err != nil {
		m.backoff.Next(key, m.clock.Now())
		m.prevErr.store(key, ErrImagePull, err)
		msg := m.event(req, corev1.EventTypeWarning, ReasonFailed, "Failed to pull image %q: %v", image, err)
		return Result{Message: msg}, ErrImagePull
	}
	start := m.clock.Now()
	ref, used, attempted, waited, err := m.pullWithCredentials(ctx, req, image, creds)
	pullDuration.WithLabelValues(resultLabel(err)).Observe(m.clock.Since(start).Seconds())
	if err != nil {
		if errors.Is(err, errUnverifiedPull) {
			// The runtime may now hold the name for content the registry
			// never served. The intent stays unresolved: the name needs
			// verification in this process (a pull in flight) and after a
			// restart (pulled with no known credential).
			m.logger.Info("A pull was not verified; its intent stays unresolved so the name requires verification", "image", image)
		} else if rerr := m.tracker.RecordImagePullFailed(image); rerr != nil {
			m.logger.Error(rerr, "Failed to resolve a pull intent; it will ask for verification after a restart", "image", image)
		}
		m.backoff.Next(key, m.clock.Now())
		m.prevErr.store(key, ErrImagePull, err)
		msg := m.event(req, corev1.EventTypeWarning, ReasonFailed, "Failed to pull image %q: %v", image, err)
		return Result{Pulled: attempted, Message: msg}, ErrImagePull
	}
	// Record under the ID the runtime reports for the image's name, the
	// key later decisions look up: some runtimes return another form of
	// the reference from PullImage.
	size := ""
	if st, err := m.images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false); err == nil && st.GetImage() != nil {
		if id := st.GetImage().GetId(); id != "" && id != ref {
			m.logger.V(2).Info("The runtime's pull result differs from the image's ID; recording the ID", "image", image, "pulled", ref, "id", id)
			ref = id
		}
		size = fmt.Sprintf(" Image size: %d bytes.", st.GetImage().GetSize())
	}
	if rerr := m.tracker.RecordImagePulled(image, ref, used); rerr != nil {
		m.logger.Error(rerr, "Failed to record a pulled image durably; it is remembered until the next restart", "image", image, "imageRef", ref)
	}
	m.backoff.Reset(key)
	m.logger.V(2).Info("Pulled image", "pod", podRef(req.Pod), "image", image, "imageRef", ref, "credential", used.Source.String())

	total := m.clock.Since(start)
	msg := m.event(req, corev1.EventTypeNormal, ReasonPulled, "Successfully pulled image %q in %v (%v including waiting).%s",
		image, (total - waited).Round(time.Millisecond), total.Round(time.Millisecond), size)
	return Result{ImageRef: ref, Pulled: true, Message: msg}, nil
}

// pullWithCredentials waits for a pull slot, then tries each credential in
// order (one anonymous attempt when there are none) until one succeeds. It
// returns the credential that succeeded, whether the registry was
// contacted, and how long it waited for a slot.
func (m *Manager) pullWithCredentials(ctx context.Context, req Request, image string, creds []credential.Credential) (ref string, used credential.Credential, attempted bool, waited time.Duration, err error) {
	begin := m.clock.Now()
	release, err := m.acquire(ctx)
	if err != nil {
		return "", used, false, 0, err
	}
	defer release()
	waited = m.clock.Since(begin)

	if len(creds) == 0 {
		creds = []credential.Credential{{}}
	}
	var errs []error
	for _, c := range creds {
		if m.limiter != nil && !m.limiter.TryAccept() {
			errs = append(errs, errQPSExceeded)
			break
		}
		attempted = true
		auth := criAuth(c)
		ref, err := m.images.PullImage(ctx, &runtimeapi.ImageSpec{Image: image}, auth, req.SandboxConfig)
		if err == nil {
			if verr := m.verifyPull(ctx, image, auth); verr != nil {
				err = fmt.Errorf("%w: %w", errUnverifiedPull, verr)
			}
		}
		if err == nil {
			return ref, c, true, waited, nil
		}
		errs = append(errs, scrubbed(err, creds))
		if ctx.Err() != nil {
			break
		}
	}
	return "", used, attempted, waited, utilerrors.NewAggregate(errs)
}

// scrubbed returns err with every form of every credential tried removed
// from its text: a runtime's error may quote what a registry answered,
// and a registry may echo what it was sent. Errors that hold none keep
// their identity (errors.Is still works on them).
func scrubbed(err error, creds []credential.Credential) error {
	var secrets []string
	for _, c := range creds {
		secrets = append(secrets, c.Auth.Password, c.Auth.IdentityToken, c.Auth.RegistryToken)
		secrets = append(secrets, leak.BasicAuth(c.Auth.Auth)...)
	}
	msg := err.Error()
	clean := leak.Redact(msg, secrets...)
	if clean == msg {
		return err
	}
	if errors.Is(err, errUnverifiedPull) {
		return fmt.Errorf("%w: %s", errUnverifiedPull, clean)
	}
	return errors.New(clean)
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

// criAuth converts a credential for the CRI. ServerAddress stays empty, as
// the kubelet leaves it: the keyring already chose the credential for this
// image's registry, and containerd 1.6 parses a set ServerAddress as a URL,
// failing on "host:port" and dropping the credential for a bare host (found
// by the e2e suite against a real containerd).
func criAuth(c credential.Credential) *runtimeapi.AuthConfig {
	if c.Auth.Empty() {
		return nil
	}
	return &runtimeapi.AuthConfig{
		Username:      c.Auth.Username,
		Password:      c.Auth.Password,
		Auth:          c.Auth.Auth,
		IdentityToken: c.Auth.IdentityToken,
		RegistryToken: c.Auth.RegistryToken,
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
