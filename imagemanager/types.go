package imagemanager

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
)

// The error categories EnsureImageExists returns. Their text is the reason
// the kubelet shows in a container's waiting state; the human detail is in
// Result.Message.
var (
	// ErrImagePull: a pull failed (the registry refused the pod's
	// credentials, or could not be reached).
	ErrImagePull = errors.New("ErrImagePull")
	// ErrImageNeverPull: the pull policy is Never and the image is absent,
	// or present but the pod may not use it (the same message either way).
	ErrImageNeverPull = errors.New("ErrImageNeverPull")
	// ErrImagePullBackOff: a recent pull of this image for this pod
	// failed; the next attempt waits.
	ErrImagePullBackOff = errors.New("ImagePullBackOff")
	// ErrInvalidImageName: the image reference cannot be parsed.
	ErrInvalidImageName = errors.New("InvalidImageName")
	// ErrImageInspect: the runtime could not say whether the image is
	// present.
	ErrImageInspect = errors.New("ImageInspectError")
)

// Request is one container's image to ensure.
type Request struct {
	// Pod is the pod the container belongs to: events are recorded on it,
	// and its namespace, name, uid and service account identify it to
	// credential providers.
	Pod *corev1.Pod
	// Container is the container's name, and InitContainer tells an init
	// container: events are recorded on the container's field path
	// (spec.containers{name} or spec.initContainers{name}), as the
	// kubelet records them. Empty: on the pod.
	Container     string
	InitContainer bool
	// Image is the container's image, as written in the pod.
	Image string
	// PullPolicy is the container's pull policy, defaulted (Always for
	// ":latest" or no tag, IfNotPresent otherwise) by the caller.
	PullPolicy corev1.PullPolicy
	// PullSecrets are the pod's image pull secrets, resolved by the caller.
	PullSecrets []*corev1.Secret
	// SandboxConfig is passed to the runtime's PullImage; it may be nil.
	SandboxConfig *runtimeapi.PodSandboxConfig
}

// Result is what EnsureImageExists did.
type Result struct {
	// ImageRef is the runtime's ref of the image to run ("" on failure).
	ImageRef string
	// Pulled is set when the registry was contacted (a pull was attempted).
	Pulled bool
	// Message is the human-readable outcome, as in the event recorded.
	Message string
	// Decision is the credential tracker's decision and its reason.
	Decision credtracker.Decision
}
