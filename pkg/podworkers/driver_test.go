package podworkers_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// fakeImages answers by image and records the requests it got.
type fakeImages struct {
	mu       sync.Mutex
	answers  map[string]error
	requests []imagemanager.Request
}

func (f *fakeImages) EnsureImageExists(_ context.Context, req imagemanager.Request) (imagemanager.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	if err := f.answers[req.Image]; err != nil {
		return imagemanager.Result{Message: "refused: " + req.Image, Pulled: true}, err
	}
	return imagemanager.Result{ImageRef: "sha256:ref-of-" + req.Image, Message: "ok: " + req.Image}, nil
}

func TestDriverRun(t *testing.T) {
	m, err := podworkers.LoadFiles("testdata/tenants.yaml")
	require.NoError(t, err)
	images := &fakeImages{answers: map[string]error{"registry.example/team-a/app:v1": nil}}
	images.answers["registry.example/team-a/app:v1"] = nil
	events := &podworkers.EventLog{}
	// team-b's pod is refused.
	refusing := &refuseFor{fakeImages: images, ns: "team-b", err: imagemanager.ErrImageNeverPull}

	results := podworkers.NewDriver(refusing, events).Run(context.Background(), m)
	want := []podworkers.Result{
		{Pod: "team-a/app-1", Container: "init", Init: true, Image: "registry.example/team-a/init:v1", PullPolicy: corev1.PullIfNotPresent, ImageRef: "sha256:ref-of-registry.example/team-a/init:v1", Message: "ok: registry.example/team-a/init:v1"},
		{Pod: "team-a/app-1", Container: "app", Image: "registry.example/team-a/app:v1", PullPolicy: corev1.PullIfNotPresent, ImageRef: "sha256:ref-of-registry.example/team-a/app:v1", Message: "ok: registry.example/team-a/app:v1"},
		{Pod: "team-a/app-1", Container: "sidecar", Image: "registry.example/public/tool", PullPolicy: corev1.PullAlways, ImageRef: "sha256:ref-of-registry.example/public/tool", Message: "ok: registry.example/public/tool"},
		{Pod: "team-b/intruder", Container: "app", Image: "registry.example/team-a/app:v1", PullPolicy: corev1.PullNever, Pulled: true, Error: "ErrImageNeverPull", Message: "refused: registry.example/team-a/app:v1", Registry: podworkers.RegistryFailed},
	}
	assert.Equal(t, want, results)

	require.Len(t, images.requests, 4)
	assert.Len(t, images.requests[0].PullSecrets, 1, "team-a's pod gets its secret")
	assert.Equal(t, "regcred", images.requests[0].PullSecrets[0].Name)
	assert.Empty(t, images.requests[3].PullSecrets)
	got := events.Events()
	require.Len(t, got, 1)
	assert.False(t, got[0].Time.IsZero(), "events are stamped")
	got[0].Time = time.Time{}
	assert.Equal(t, []podworkers.Event{{Object: "team-b/intruder", Type: "Warning", Reason: "FailedToRetrieveImagePullSecret",
		Message: "Unable to retrieve some image pull secrets (team-b/does-not-exist); attempting to pull the image may not succeed.",
		Source:  podworkers.Source{Component: "pullguard"}}}, got, "a pod-level event has no field path")
}

type refuseFor struct {
	*fakeImages
	ns  string
	err error
}

func (r *refuseFor) EnsureImageExists(ctx context.Context, req imagemanager.Request) (imagemanager.Result, error) {
	if req.Pod.Namespace == r.ns {
		r.answers[req.Image] = r.err
		defer func() { r.answers[req.Image] = nil }()
	}
	return r.fakeImages.EnsureImageExists(ctx, req)
}

func TestDriverConcurrentNamespacesKeepFileOrder(t *testing.T) {
	m, err := podworkers.LoadFiles("testdata/tenants.yaml", "testdata/list.json")
	require.NoError(t, err)
	seq := podworkers.NewDriver(&fakeImages{}, &podworkers.EventLog{}).Run(context.Background(), m)
	conc := podworkers.NewDriver(&fakeImages{}, &podworkers.EventLog{}, podworkers.WithConcurrentNamespaces(true)).Run(context.Background(), m)
	assert.Equal(t, seq, conc)
}

func TestRegistryAnswer(t *testing.T) {
	tests := []struct {
		name    string
		pulled  bool
		err     error
		message string
		want    string
	}{
		{name: "not contacted", want: ""},
		{name: "accepted", pulled: true, message: "ok", want: podworkers.RegistryAccepted},
		{name: "401", pulled: true, err: imagemanager.ErrImagePull, message: "HEAD http://r/v2/a/manifests/v1: unexpected status code 401 Unauthorized", want: podworkers.RegistryRefused},
		{name: "403 denied", pulled: true, err: imagemanager.ErrImagePull, message: "DENIED: requested access to the resource is denied", want: podworkers.RegistryRefused},
		{name: "connection refused", pulled: true, err: imagemanager.ErrImagePull, message: "dial tcp 127.0.0.1:1: connect: connection refused", want: podworkers.RegistryUnreachable},
		{name: "dns", pulled: true, err: imagemanager.ErrImagePull, message: "lookup registry.example: no such host", want: podworkers.RegistryUnreachable},
		{name: "503", pulled: true, err: imagemanager.ErrImagePull, message: "unexpected status code 503 Service Unavailable", want: podworkers.RegistryUnreachable},
		{name: "a refusal among failures", pulled: true, err: imagemanager.ErrImagePull, message: "[dial tcp: i/o timeout, 401 Unauthorized]", want: podworkers.RegistryRefused},
		{name: "other", pulled: true, err: imagemanager.ErrImagePull, message: "disk full", want: podworkers.RegistryFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			images := answerImages{res: imagemanager.Result{Pulled: tt.pulled, Message: tt.message}, err: tt.err}
			m, err := podworkers.Load("p.yaml", []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: 'r/a:v1'}]}\n"))
			require.NoError(t, err)
			results := podworkers.NewDriver(images, &podworkers.EventLog{}).Run(context.Background(), m)
			require.Len(t, results, 1)
			assert.Equal(t, tt.want, results[0].Registry)
		})
	}
}

type answerImages struct {
	res imagemanager.Result
	err error
}

func (a answerImages) EnsureImageExists(context.Context, imagemanager.Request) (imagemanager.Result, error) {
	return a.res, a.err
}

// cancelAfter cancels the run's context during its n-th request, as a
// signal arriving during a pull does.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
	events *podworkers.EventLog
	seen   []string
}

func (c *cancelAfter) EnsureImageExists(ctx context.Context, req imagemanager.Request) (imagemanager.Result, error) {
	c.seen = append(c.seen, req.Image)
	// As the image manager does: the event goes on the container's field.
	field := "spec.containers{" + req.Container + "}"
	if req.InitContainer {
		field = "spec.initContainers{" + req.Container + "}"
	}
	ref := &corev1.ObjectReference{Kind: "Pod", Namespace: req.Pod.Namespace, Name: req.Pod.Name, UID: req.Pod.UID, FieldPath: field}
	c.events.Event(ref, "Normal", "Pulling", "pulling "+req.Image)
	if len(c.seen) == c.n {
		c.cancel()
		return imagemanager.Result{Pulled: true, Message: "context canceled"}, errors.Join(imagemanager.ErrImagePull, ctx.Err())
	}
	return imagemanager.Result{ImageRef: "sha256:x"}, nil
}

func TestDriverStopsWhenCancelled(t *testing.T) {
	m, err := podworkers.LoadFiles("testdata/tenants.yaml")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := &podworkers.EventLog{}
	images := &cancelAfter{n: 2, cancel: cancel, events: events}
	results := podworkers.NewDriver(images, events).Run(ctx, m)
	assert.Len(t, images.seen, 2, "no container starts after the cancellation")
	require.Len(t, results, 2)
	assert.Equal(t, "ErrImagePull", results[1].Error)

	// The driver names each container, init containers as such.
	got := events.Events()
	require.Len(t, got, 2)
	assert.Equal(t, "spec.initContainers{init}", got[0].FieldPath)
	assert.Equal(t, "spec.containers{app}", got[1].FieldPath)
}
