package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// startNode assembles a node in this process on the suite's containerd.
func startNode(t *testing.T, root string) *podworkers.Node {
	t.Helper()
	settings, err := nodeconfig.ResolveSettings(nil, nodeconfig.Flags{})
	require.NoError(t, err)
	n, err := podworkers.Start(context.Background(), podworkers.Config{RootDir: root, RuntimeEndpoint: h.containerd.endpoint(), Settings: settings, Logger: klog.Background().V(10)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// Scenario 6: with the registry down, pods with matching credentials still
// start; pods that must verify fail with a clear event and back off.
func TestRegistryDown(t *testing.T) {
	need(t)
	alice, carol := newTenant("s6-alice"), newTenant("s6-carol")
	h.issuer.grant(alice.user, "s6/team-a/*", "pull")
	h.issuer.grant(carol.user, "s6/team-a/*", "pull")
	image := push(t, "s6/team-a/app", "v1", 601)
	ctx := context.Background()
	n := startNode(t, newRoot(t))
	m, err := podworkers.Load("s6", []byte(secretYAML("team-a", "regcred", alice)+secretYAML("team-c", "regcred", carol)+
		podYAML("team-a", "app-1", image, "IfNotPresent", "regcred")+podYAML("team-a", "app-2", image, "IfNotPresent", "regcred")+
		podYAML("team-c", "app", image, "IfNotPresent", "regcred")))
	require.NoError(t, err)
	run := func(i int) podworkers.Result {
		return n.Run(ctx, &podworkers.Manifests{Secrets: m.Secrets, ServiceAccounts: m.ServiceAccounts, Pods: m.Pods[i : i+1]})[0]
	}

	r := run(0)
	require.Empty(t, r.Error, r.Message)

	h.registry.stop()
	t.Cleanup(func() { require.NoError(t, h.registry.start()) })

	r = run(1)
	assert.Empty(t, r.Error, "matching credentials need no registry")
	assert.False(t, r.Pulled)

	before := len(n.Events.Events())
	r = run(2)
	assert.Equal(t, imagemanager.ErrImagePull.Error(), r.Error)
	assert.Equal(t, podworkers.RegistryUnreachable, r.Registry, "a registry that is down is unreachable, not a refusal")
	evs := n.Events.Events()[before:]
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1]
	assert.Equal(t, "Warning", last.Type)
	assert.Equal(t, "Failed", last.Reason)
	assert.Contains(t, last.Message, `Failed to pull image "`+image+`"`)
	t.Logf("the event while the registry is down: %s", last.Message)

	before = len(n.Events.Events())
	r = run(2)
	assert.Equal(t, imagemanager.ErrImagePullBackOff.Error(), r.Error)
	backoff := n.Events.Events()[before:]
	require.Len(t, backoff, 1)
	assert.False(t, backoff[0].Time.IsZero())
	backoff[0].Time = time.Time{}
	assert.Equal(t, podworkers.Event{Object: "team-c/app", FieldPath: "spec.containers{app}", Type: "Normal", Reason: "BackOff", Message: `Back-off pulling image "` + image + `"`,
		Source: podworkers.Source{Component: podworkers.EventSourceComponent}}, backoff[0])
}
