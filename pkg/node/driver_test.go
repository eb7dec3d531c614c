package node_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/pkg/node"
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
	m, err := node.LoadFiles("testdata/tenants.yaml")
	require.NoError(t, err)
	images := &fakeImages{answers: map[string]error{"registry.example/team-a/app:v1": nil}}
	images.answers["registry.example/team-a/app:v1"] = nil
	events := &node.EventLog{}
	// team-b's pod is refused.
	refusing := &refuseFor{fakeImages: images, ns: "team-b", err: imagemanager.ErrImageNeverPull}

	results := node.NewDriver(refusing, events).Run(context.Background(), m)
	want := []node.Result{
		{Pod: "team-a/app-1", Container: "init", Init: true, Image: "registry.example/team-a/init:v1", PullPolicy: corev1.PullIfNotPresent, ImageRef: "sha256:ref-of-registry.example/team-a/init:v1", Message: "ok: registry.example/team-a/init:v1"},
		{Pod: "team-a/app-1", Container: "app", Image: "registry.example/team-a/app:v1", PullPolicy: corev1.PullIfNotPresent, ImageRef: "sha256:ref-of-registry.example/team-a/app:v1", Message: "ok: registry.example/team-a/app:v1"},
		{Pod: "team-a/app-1", Container: "sidecar", Image: "registry.example/public/tool", PullPolicy: corev1.PullAlways, ImageRef: "sha256:ref-of-registry.example/public/tool", Message: "ok: registry.example/public/tool"},
		{Pod: "team-b/intruder", Container: "app", Image: "registry.example/team-a/app:v1", PullPolicy: corev1.PullNever, Pulled: true, Error: "ErrImageNeverPull", Message: "refused: registry.example/team-a/app:v1"},
	}
	assert.Equal(t, want, results)

	require.Len(t, images.requests, 4)
	assert.Len(t, images.requests[0].PullSecrets, 1, "team-a's pod gets its secret")
	assert.Equal(t, "regcred", images.requests[0].PullSecrets[0].Name)
	assert.Empty(t, images.requests[3].PullSecrets)
	assert.Equal(t, []node.Event{{Object: "team-b/intruder", Type: "Warning", Reason: "FailedToRetrieveImagePullSecret",
		Message: "Unable to retrieve some image pull secrets (team-b/does-not-exist); attempting to pull the image may not succeed."}}, events.Events())
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
	m, err := node.LoadFiles("testdata/tenants.yaml", "testdata/list.json")
	require.NoError(t, err)
	seq := node.NewDriver(&fakeImages{}, &node.EventLog{}).Run(context.Background(), m)
	conc := node.NewDriver(&fakeImages{}, &node.EventLog{}, node.WithConcurrentNamespaces(true)).Run(context.Background(), m)
	assert.Equal(t, seq, conc)
}
