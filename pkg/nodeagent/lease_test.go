package nodeagent_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/pullguard/pullguard/pkg/nodeagent"
)

func TestLease(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	held := func(holder string, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: nodeagent.DefaultLeaseName, Namespace: namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(600)),
				RenewTime: ptr.To(metav1.NewMicroTime(renewed)), LeaseTransitions: ptr.To(int32(3))},
		}
	}
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		// conflicts is how many updates fail with a conflict (another node
		// took it between the read and the write).
		conflicts       int
		wantWaits       []string
		wantTransitions int32
	}{
		{name: "none yet: created, held by this node", wantTransitions: 0},
		{name: "released by another node: taken", lease: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeagent.DefaultLeaseName, Namespace: namespace}, Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To(int32(3))}}, wantTransitions: 4},
		{name: "this node's own (its agent restarted): taken again", lease: held(nodeName, start), wantTransitions: 3},
		{name: "another node's, expired: taken over", lease: held("node-b", start.Add(-10*time.Minute)), wantTransitions: 4},
		{name: "taken by another node between read and write: tries again", lease: held("node-b", start.Add(-10*time.Minute)), conflicts: 1, wantWaits: []string{"another node"}, wantTransitions: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tt.lease != nil {
				_, err := client.CoordinationV1().Leases(namespace).Create(context.Background(), tt.lease, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			conflicts := tt.conflicts
			client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
				if conflicts > 0 {
					conflicts--
					return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, nodeagent.DefaultLeaseName, nil)
				}
				return false, nil, nil
			})
			clk := testingclock.NewFakeClock(start)
			l := &nodeagent.Lease{Client: client.CoordinationV1(), Namespace: namespace, Name: nodeagent.DefaultLeaseName, Holder: nodeName, Duration: 11 * time.Minute, Clock: clk}
			var waits []string
			done := make(chan error, 1)
			go func() { done <- l.Acquire(context.Background(), func(h string) { waits = append(waits, h) }) }()
			for range tt.conflicts {
				for !clk.HasWaiters() {
					runtime.Gosched()
				}
				clk.Step(nodeagent.DefaultLeaseInterval)
			}
			require.NoError(t, <-done)
			assert.Equal(t, tt.wantWaits, waits)
			got, err := client.CoordinationV1().Leases(namespace).Get(context.Background(), nodeagent.DefaultLeaseName, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, nodeName, ptr.Deref(got.Spec.HolderIdentity, ""))
			assert.Equal(t, int32(660), ptr.Deref(got.Spec.LeaseDurationSeconds, 0))
			assert.Equal(t, tt.wantTransitions, ptr.Deref(got.Spec.LeaseTransitions, -1))
			assert.True(t, got.Spec.RenewTime.Equal(ptr.To(metav1.NewMicroTime(clk.Now()))))

			require.NoError(t, l.Release(context.Background(), false))
			got, err = client.CoordinationV1().Leases(namespace).Get(context.Background(), nodeagent.DefaultLeaseName, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Nil(t, got.Spec.HolderIdentity)
		})
	}
}

// TestLeaseReleaseLeavesAnotherNodes: a release never frees a Lease that
// another node holds.
func TestLeaseReleaseLeavesAnotherNodes(t *testing.T) {
	client := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: nodeagent.DefaultLeaseName, Namespace: namespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-b")},
	})
	l := &nodeagent.Lease{Client: client.CoordinationV1(), Namespace: namespace, Name: nodeagent.DefaultLeaseName, Holder: nodeName}
	require.NoError(t, l.Release(context.Background(), false))
	got, err := client.CoordinationV1().Leases(namespace).Get(context.Background(), nodeagent.DefaultLeaseName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "node-b", ptr.Deref(got.Spec.HolderIdentity, ""))
}

// TestLeaseHaltsTheRollout: a release after failed work lists its holder
// on the Lease, one after success removes it; once MaxFailed other
// holders are listed, the Lease is not taken (ErrHalted) until the list
// is cleared. A holder's own earlier failure does not count against it.
func TestLeaseHaltsTheRollout(t *testing.T) {
	client := fake.NewClientset()
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	lease := func(holder string) *nodeagent.Lease {
		return &nodeagent.Lease{Client: client.CoordinationV1(), Namespace: namespace, Name: nodeagent.DefaultLeaseName, Holder: holder, Duration: time.Minute, Clock: clk, MaxFailed: 2}
	}
	annotation := func() string {
		got, err := client.CoordinationV1().Leases(namespace).Get(context.Background(), nodeagent.DefaultLeaseName, metav1.GetOptions{})
		require.NoError(t, err)
		return got.Annotations[nodeagent.FailedAnnotation]
	}
	ctx := context.Background()
	for _, h := range []string{"node-b/install", "node-a/install"} {
		l := lease(h)
		require.NoError(t, l.Acquire(ctx, nil))
		require.NoError(t, l.Release(ctx, true))
	}
	assert.Equal(t, "node-a/install,node-b/install", annotation())

	err := lease("node-c/install").Acquire(ctx, nil)
	require.ErrorIs(t, err, nodeagent.ErrHalted)
	assert.Contains(t, err.Error(), "2 nodes failed (node-a/install, node-b/install)")
	assert.Contains(t, err.Error(), nodeagent.FailedAnnotation)

	// node-a's own failure does not count against node-a: one other.
	a := lease("node-a/install")
	require.NoError(t, a.Acquire(ctx, nil))
	require.NoError(t, a.Release(ctx, false))
	assert.Equal(t, "node-b/install", annotation(), "a success takes the holder off")

	c := lease("node-c/install")
	require.NoError(t, c.Acquire(ctx, nil), "one failure of two allowed")
	require.NoError(t, c.Release(ctx, false))

	unbounded := lease("node-d/install")
	unbounded.MaxFailed = 0
	require.NoError(t, unbounded.Acquire(ctx, nil))
	require.NoError(t, unbounded.Release(ctx, true))
	assert.Equal(t, "node-b/install,node-d/install", annotation())
}
