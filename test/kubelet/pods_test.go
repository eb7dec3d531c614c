package kubelet

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// tenant is a registry user with a pull secret in its own namespace.
type tenant struct {
	ns, user, password string
}

func (c *cluster) newTenant(ctx context.Context, ns, user string) (*tenant, error) {
	tn := &tenant{ns: ns, user: user, password: newSecret(user)}
	c.reg.setUser(tn.user, tn.password)
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	if err := c.pullSecret(ctx, tn, "regcred"); err != nil {
		return nil, err
	}
	return tn, nil
}

// pullSecret creates the secret name in tn's namespace: a docker config
// of tn's registry account.
func (c *cluster) pullSecret(ctx context.Context, tn *tenant, name string) error {
	return c.pullSecretFor(ctx, tn, name, c.reg.addr)
}

// pullSecretFor is pullSecret with the account filed under key, such as
// "https://index.docker.io/v1/", the key `docker login` writes for Docker
// Hub.
func (c *cluster) pullSecretFor(ctx context.Context, tn *tenant, name, key string) error {
	dockercfg := fmt.Sprintf(`{"auths":{%q:{"username":%q,"password":%q}}}`, key, tn.user, tn.password)
	_, err := c.client.CoreV1().Secrets(tn.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(dockercfg)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", tn.ns, name, err)
	}
	return nil
}

// pod is a host-network pod bound to the node: no scheduler, no CNI.
func pod(ns, name, image string, policy corev1.PullPolicy, withSecret bool) *corev1.Pod {
	grace := int64(1)
	no := false
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName: nodeName, HostNetwork: true, TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
			Containers: []corev1.Container{{Name: "app", Image: image, ImagePullPolicy: policy}},
		},
	}
	if withSecret {
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	}
	return p
}

// runAsNonRoot sets the pod's securityContext to {runAsNonRoot: true},
// with no runAsUser: the kubelet takes the user from the image.
func runAsNonRoot(p *corev1.Pod) *corev1.Pod {
	yes := true
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes}
	return p
}

// withImageVolume mounts image (pulled with policy) read-only at /data in
// the pod's container: an image volume (KEP-4639).
func withImageVolume(p *corev1.Pod, image string, policy corev1.PullPolicy) *corev1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: image, PullPolicy: policy},
	}})
	p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: "/data", ReadOnly: true})
	return p
}

// outcome is where a pod's container got: "Running" or a waiting reason.
type outcome struct {
	state   string
	message string
}

// errorReasons end a wait at once: the kubelet refused the container.
var errorReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true,
	"InvalidImageName": true, "CreateContainerError": true, "CreateContainerConfigError": true,
	"RunContainerError": true, "CrashLoopBackOff": true,
}

func containerOutcome(p *corev1.Pod) (outcome, bool) {
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Running != nil:
			return outcome{state: "Running"}, true
		case cs.State.Waiting != nil && errorReasons[cs.State.Waiting.Reason]:
			return outcome{state: cs.State.Waiting.Reason, message: cs.State.Waiting.Message}, true
		case cs.State.Terminated != nil:
			return outcome{state: "Terminated:" + cs.State.Terminated.Reason, message: cs.State.Terminated.Message}, true
		}
	}
	return outcome{}, false
}

// run creates the pod and waits for a final outcome of its container.
func (c *cluster) run(ctx context.Context, p *corev1.Pod) (outcome, error) {
	if _, err := c.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return outcome{}, fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return c.await(ctx, p.Namespace, p.Name, func(o outcome) bool { return true })
}

// running creates a pod that must run and waits for its container's
// outcome. A pod the kubelet started without its pull secret is waited
// for until its retry: the kubelet's secret cache starts watching a
// secret when the first pod naming it arrives and waits one second for
// it ("Unable to retrieve pull secret" when that is missed, in either
// mode, on a busy machine); the pull is then made without credentials and
// refused, and the kubelet tries again with the secret (under its own
// gate at the next sync, behind serve after its image back-off: see
// docs/decision-matrix.md). Only a refused pull is waited through; a
// retry that is refused as well ends in the wait's timeout, whose error
// says so. missed says the kubelet logged the miss, for the test's log.
func (c *cluster) running(ctx context.Context, p *corev1.Pod) (o outcome, missed bool, err error) {
	logFrom := c.klOut.position()
	if o, err = c.run(ctx, p); err != nil || !pullRefused(o) || !c.startedWithoutSecret(p, logFrom) {
		return o, false, err
	}
	o, err = c.await(ctx, p.Namespace, p.Name, func(o outcome) bool { return !pullRefused(o) })
	if err != nil {
		err = fmt.Errorf("the kubelet pulled without the pod's secret (its secret cache missed its sync), and its retry with the secret did not run: %w", err)
	}
	return o, true, err
}

// pullRefused says whether o is a refused pull.
func pullRefused(o outcome) bool { return o.state == "ErrImagePull" || o.state == "ImagePullBackOff" }

// startedWithoutSecret reports whether the kubelet logged, from line from
// of its output on, that it could not get p's pull secret (its
// watch-based secret cache waits one second for a sync).
func (c *cluster) startedWithoutSecret(p *corev1.Pod, from int) bool {
	marker := secretMissMarker(p.Namespace, p.Name)
	for _, l := range c.klOut.from(from) {
		if strings.Contains(l, marker) {
			return true
		}
	}
	return false
}

// secretMissMarker is the part of the kubelet's log line (v1.36, klog's
// text format) that says it could not get a pull secret of pod ns/name;
// the closing quote keeps "app" from matching "app-1".
func secretMissMarker(ns, name string) string {
	return fmt.Sprintf("Unable to retrieve pull secret, the image pull may not succeed.\" pod=%q", ns+"/"+name)
}

// await polls the pod until its container's outcome satisfies done.
func (c *cluster) await(ctx context.Context, ns, name string, done func(outcome) bool) (outcome, error) {
	var got outcome
	err := poll(90*time.Second, 50*time.Millisecond, func() (bool, error) {
		p, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		o, ok := containerOutcome(p)
		if ok {
			got = o
		}
		return ok && done(o), nil
	})
	if err != nil {
		return got, fmt.Errorf("pod %s/%s (last outcome %+v): %w", ns, name, got, err)
	}
	return got, nil
}

// remove deletes the pod and waits until the kubelet has let it go, so
// that no back-off retry of a refused pull reaches the registry later.
func (c *cluster) remove(ctx context.Context, ns, name string) error {
	if err := c.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", ns, name, err)
	}
	return poll(90*time.Second, 50*time.Millisecond, func() (bool, error) {
		_, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// containerID is the runtime's ID of the pod's (first) container.
func (c *cluster) containerID(ctx context.Context, ns, name string) (string, error) {
	p, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, cs := range p.Status.ContainerStatuses {
		if _, id, ok := strings.Cut(cs.ContainerID, "://"); ok && id != "" {
			return id, nil
		}
	}
	return "", fmt.Errorf("pod %s/%s has no container ID yet", ns, name)
}

// kubeletEvent is one event the kubelet recorded for a pod.
type kubeletEvent struct{ Type, Reason, Message string }

// awaitEvent waits until the kubelet has recorded an event with reason for
// the pod whose message contains text, and returns every event so far.
func (c *cluster) awaitEvent(ctx context.Context, ns, name, reason, text string) ([]kubeletEvent, error) {
	return c.awaitEventMatching(ctx, ns, name, reason, regexp.MustCompile(regexp.QuoteMeta(text)))
}

// kubeletEvents lists the events the kubelet recorded for the pod.
func (c *cluster) kubeletEvents(ctx context.Context, ns, name string) ([]corev1.Event, error) {
	list, err := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err != nil {
		return nil, err
	}
	var evs []corev1.Event
	for _, e := range list.Items {
		if e.Source.Component == "kubelet" {
			evs = append(evs, e)
		}
	}
	return evs, nil
}

// eventCount is how many times the kubelet recorded an event with reason
// for the pod whose message contains text (an event repeated is one
// object with a count). The kubelet's recorder drops a pod's events of
// one type (Normal, Warning) beyond a burst of 25 (client-go's spam
// filter), so a count that did not grow proves nothing alone.
func (c *cluster) eventCount(ctx context.Context, ns, name, reason, text string) (int, error) {
	evs, err := c.kubeletEvents(ctx, ns, name)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range evs {
		if e.Reason == reason && strings.Contains(e.Message, text) {
			n += int(max(e.Count, 1))
		}
	}
	return n, nil
}

// awaitEventMatching is awaitEvent with a pattern for the message.
func (c *cluster) awaitEventMatching(ctx context.Context, ns, name, reason string, text *regexp.Regexp) ([]kubeletEvent, error) {
	var evs []kubeletEvent
	err := poll(30*time.Second, 50*time.Millisecond, func() (bool, error) {
		all, err := c.kubeletEvents(ctx, ns, name)
		if err != nil {
			return false, err
		}
		evs = evs[:0]
		found := false
		for _, e := range all {
			evs = append(evs, kubeletEvent{Type: e.Type, Reason: e.Reason, Message: e.Message})
			if e.Reason == reason && text.MatchString(e.Message) {
				found = true
			}
		}
		return found, nil
	})
	if err != nil {
		return evs, fmt.Errorf("no kubelet event %s %q for %s/%s (have %+v): %w", reason, text, ns, name, evs, err)
	}
	return evs, nil
}
