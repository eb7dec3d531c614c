package podworkers

import (
	"context"
	"errors"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/imagemanager"
)

// ImageEnsurer is the image manager as the driver uses it.
type ImageEnsurer interface {
	EnsureImageExists(ctx context.Context, req imagemanager.Request) (imagemanager.Result, error)
}

// Result is the outcome for one container.
type Result struct {
	Pod        string            `json:"pod"` // namespace/name
	Container  string            `json:"container"`
	Init       bool              `json:"init"`
	Image      string            `json:"image"`
	PullPolicy corev1.PullPolicy `json:"pullPolicy"`
	ImageRef   string            `json:"imageRef"`
	// Pulled says the registry was contacted.
	Pulled bool `json:"pulled"`
	// Error is "" or the kubelet's reason: ErrImagePull, ErrImageNeverPull,
	// ImagePullBackOff, InvalidImageName (or ImageInspectError).
	Error    string               `json:"error"`
	Message  string               `json:"message"`
	Decision credtracker.Decision `json:"-"`
	// Registry says how the registry answered a pull: "" when it was not
	// contacted, else one of the Registry* values.
	Registry string `json:"registry,omitempty"`
}

// How the registry answered a pull (Result.Registry).
const (
	// RegistryAccepted: the pull, or the verification of a present
	// image, succeeded.
	RegistryAccepted = "accepted"
	// RegistryRefused: the registry answered and refused (401, 403, 404):
	// the audit trail of a tenant kept out.
	RegistryRefused = "refused"
	// RegistryUnreachable: the registry could not be reached (no route,
	// refused connection, DNS, TLS, timeout) or was unavailable (5xx):
	// nothing was decided about the pod's credentials.
	RegistryUnreachable = "unreachable"
	// RegistryFailed: any other failure of the pull.
	RegistryFailed = "failed"
)

// Driver drives pods through the image manager.
type Driver struct {
	images     ImageEnsurer
	recorder   record.EventRecorder
	concurrent bool
}

// Option configures a Driver.
type Option func(*Driver)

// WithConcurrentNamespaces runs the pods of different namespaces at the
// same time, as the kubelet's pod workers do; the pods of one namespace
// still run in file order. Off (the default), every pod runs in file
// order, one after the other, so a run is reproducible.
func WithConcurrentNamespaces(on bool) Option { return func(d *Driver) { d.concurrent = on } }

// NewDriver returns a driver over images, recording pod-level events (a
// missing pull secret) with recorder.
func NewDriver(images ImageEnsurer, recorder record.EventRecorder, opts ...Option) *Driver {
	d := &Driver{images: images, recorder: recorder}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Run ensures the image of every init container, then every container, of
// every pod, and returns the results in file order.
func (d *Driver) Run(ctx context.Context, m *Manifests) []Result {
	perPod := make([][]Result, len(m.Pods))
	if !d.concurrent {
		for i, p := range m.Pods {
			if ctx.Err() != nil {
				break
			}
			perPod[i] = d.runPod(ctx, m, p)
		}
	} else {
		byNS := map[string][]int{}
		var order []string
		for i, p := range m.Pods {
			if _, ok := byNS[p.Namespace]; !ok {
				order = append(order, p.Namespace)
			}
			byNS[p.Namespace] = append(byNS[p.Namespace], i)
		}
		var wg sync.WaitGroup
		for _, ns := range order {
			wg.Add(1)
			go func(idx []int) {
				defer wg.Done()
				for _, i := range idx {
					if ctx.Err() != nil {
						return
					}
					perPod[i] = d.runPod(ctx, m, m.Pods[i])
				}
			}(byNS[ns])
		}
		wg.Wait()
	}
	var out []Result
	for _, rs := range perPod {
		out = append(out, rs...)
	}
	return out
}

func (d *Driver) runPod(ctx context.Context, m *Manifests, p *corev1.Pod) []Result {
	secrets, missing := resolveSecrets(m, p)
	if len(missing) > 0 {
		d.recorder.Eventf(p, corev1.EventTypeWarning, imagemanager.ReasonFailedToRetrieveAuth,
			"Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(missing, ", "))
	}
	var out []Result
	run := func(c corev1.Container, init bool) {
		policy := DefaultPullPolicy(c.Image, c.ImagePullPolicy)
		res, err := d.images.EnsureImageExists(ctx, imagemanager.Request{Pod: p, Container: c.Name, InitContainer: init, Image: c.Image, PullPolicy: policy, PullSecrets: secrets})
		r := Result{
			Pod: p.Namespace + "/" + p.Name, Container: c.Name, Init: init, Image: c.Image, PullPolicy: policy,
			ImageRef: res.ImageRef, Pulled: res.Pulled, Error: errorReason(err), Message: res.Message, Decision: res.Decision,
		}
		r.Registry = registryAnswer(r)
		out = append(out, r)
	}
	// An interrupted run stops between containers: the one in flight
	// ends (its pull intent resolved by the image manager), no other
	// starts.
	for _, c := range p.Spec.InitContainers {
		if ctx.Err() != nil {
			return out
		}
		run(c, true)
	}
	for _, c := range p.Spec.Containers {
		if ctx.Err() != nil {
			return out
		}
		run(c, false)
	}
	return out
}

// registryAnswer classifies how the registry answered r's pull, from the
// error text the runtime gave (runtimes return errors as text, over CRI).
// A refusal is looked for first: with several credentials, one refusal
// among other failures is still a refusal.
func registryAnswer(r Result) string {
	if !r.Pulled {
		return ""
	}
	if r.Error == "" {
		return RegistryAccepted
	}
	msg := strings.ToLower(r.Message)
	for _, s := range refusalMarkers {
		if strings.Contains(msg, s) {
			return RegistryRefused
		}
	}
	for _, s := range unreachableMarkers {
		if strings.Contains(msg, s) {
			return RegistryUnreachable
		}
	}
	return RegistryFailed
}

var (
	refusalMarkers = []string{"401 unauthorized", "403 forbidden", "404 not found", "unauthorized", "denied", "forbidden",
		"authentication required", "manifest unknown", "name unknown", "not found"}
	unreachableMarkers = []string{"connection refused", "no such host", "i/o timeout", "dial tcp", "network is unreachable",
		"no route to host", "connection reset", "tls:", "x509:", "deadline exceeded", "timeout", "eof",
		"500 internal server error", "502 bad gateway", "503 service unavailable", "504 gateway timeout", "service unavailable",
		"server misbehaving", "unavailable"}
)

// resolveSecrets finds the pod's image pull secrets in its namespace and
// names the ones that are missing.
func resolveSecrets(m *Manifests, p *corev1.Pod) (found []*corev1.Secret, missing []string) {
	for _, ref := range p.Spec.ImagePullSecrets {
		if s, ok := m.Secrets[types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}]; ok {
			found = append(found, s)
		} else {
			missing = append(missing, p.Namespace+"/"+ref.Name)
		}
	}
	return found, missing
}

// DefaultPullPolicy defaults a container's pull policy as Kubernetes does:
// Always for an image tagged ":latest" or with no tag nor digest,
// IfNotPresent otherwise. A set policy is kept.
func DefaultPullPolicy(image string, set corev1.PullPolicy) corev1.PullPolicy {
	if set != "" {
		return set
	}
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	last := image[strings.LastIndexByte(image, '/')+1:]
	if i := strings.LastIndexByte(last, ':'); i >= 0 && last[i+1:] != "latest" {
		return corev1.PullIfNotPresent
	}
	return corev1.PullAlways
}

func errorReason(err error) string {
	for _, e := range []error{imagemanager.ErrImagePull, imagemanager.ErrImageNeverPull, imagemanager.ErrImagePullBackOff, imagemanager.ErrInvalidImageName, imagemanager.ErrImageInspect} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return err.Error()
	}
	return ""
}
