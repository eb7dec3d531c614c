package criproxy_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
)

// TestConcurrentTenants runs 64 pods of three tenants at once against the
// same images (under -race): whatever the interleaving, the tenant without
// access never gets an image, the others always do, and ImageStatus never
// shows a credential-pulled image.
func TestConcurrentTenants(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	const images = 4
	for i := 0; i < images; i++ {
		h.fake.publish(t, fmt.Sprintf("%s/team-a/app%d:v1", reg, i), id(100+i), "alice:pw", "carol:pw")
	}
	type who struct{ ns, user, pw string }
	tenants := []who{{"a", "alice", "pw"}, {"b", "bob", "nope"}, {"c", "carol", "pw"}}
	var wg sync.WaitGroup
	errs := make(chan error, 256)
	for p := 0; p < 64; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			w := tenants[p%len(tenants)]
			image := fmt.Sprintf("%s/team-a/app%d:v1", reg, p%images)
			for round := 0; round < 3; round++ {
				if h.newPod("probe", nil).presence(t, image) != "" {
					errs <- fmt.Errorf("pod %d: %s reported present to a pod with nothing to show", p, image)
				}
				ref, err := h.pull(t, w.ns, image, w.user, w.pw)
				switch {
				case w.user == "bob" && err == nil:
					errs <- fmt.Errorf("pod %d: bob got %s (%s)", p, image, ref)
				case w.user != "bob" && err != nil:
					errs <- fmt.Errorf("pod %d: %s refused: %w", p, w.user, err)
				}
			}
		}(p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Zero(t, h.tracker.Status().Intents, "every intent is resolved")
	assert.Len(t, h.tracker.Records(), images)
}

// TestDrain checks the shutdown contract: Drain waits for pulls in flight
// to record their outcome, and refuses new pulls with Unavailable.
func TestDrain(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, reg+"/team-a/app:v1", id(1), "alice:pw")
	gate, entered := make(chan struct{}), make(chan string, 1)
	h.fake.gate, h.fake.entered = gate, entered
	errc := make(chan error, 1)
	go func() { _, err := h.pull(t, "a", reg+"/team-a/app:v1", "alice", "pw"); errc <- err }()
	<-entered
	require.Equal(t, 1, h.tracker.Status().Intents)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Error(t, h.server.Drain(ctx), "a pull is still in flight")
	_, err := h.pull(t, "c", reg+"/team-a/app:v1", "carol", "pw")
	assert.Equal(t, codes.Unavailable, status.Code(err), "no new pull while draining")

	close(gate)
	require.NoError(t, h.server.Drain(context.Background()))
	require.NoError(t, <-errc)
	assert.Zero(t, h.tracker.Status().Intents)
	assert.Len(t, h.tracker.Records(), 1)
}

// TestCancelledPullAfterStore: the kubelet gives up on a pull after the
// runtime stored the image. The name must not look preloaded: it is
// recorded as pulled with no known credential.
func TestCancelledPullAfterStore(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, reg+"/team-a/app:v1", id(1), "alice:pw")
	h.fake.storeFirst = true
	gate, entered := make(chan struct{}), make(chan string, 1)
	h.fake.gate, h.fake.entered = gate, entered
	defer close(gate)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.client.PullImage(ctx, &runtimeapi.ImageSpec{Image: reg + "/team-a/app:v1"}, creds("alice", "pw"), pod("a", "p"))
		errc <- err
	}()
	<-entered
	cancel()
	require.Error(t, <-errc)
	require.NoError(t, h.server.Drain(context.Background()))
	assert.Zero(t, h.tracker.Status().Intents)
	assert.False(t, h.present(t, reg+"/team-a/app:v1"), "the interrupted pull's image is not free")
	recs := h.tracker.Records()
	require.Len(t, recs, 1)
	rr := recs[0].Repositories[reg+"/team-a/app"]
	require.NotNil(t, rr)
	assert.False(t, rr.NodeAccessible)
	assert.Empty(t, rr.Secrets, "no credential is known to have pulled it")
	var _ credtracker.Importer // the proxy uses the tracker's Importer for this
}
