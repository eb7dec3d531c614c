package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Defaults of a Lease.
const (
	DefaultLeaseName     = "pullguard-node-agent"
	DefaultLeaseInterval = 5 * time.Second
	defaultLeaseRequest  = 10 * time.Second
	// DefaultMaxFailed is how many failed nodes halt a rollout.
	DefaultMaxFailed = 3
)

// Lease is the cluster's lock that lets one node at a time be switched:
// a coordination.k8s.io Lease whose holder is a node's name. It is taken
// by a create, or an update at the resourceVersion read, when it has no
// holder, is this node's (a restarted agent), or its holder did not renew
// it within its duration (an agent that died holding it). The holder does
// not renew it: its work is bounded by less than Duration.
type Lease struct {
	// Client is the API server's coordination.k8s.io/v1 (a clientset's
	// CoordinationV1()).
	Client          coordinationv1client.LeasesGetter
	Namespace, Name string
	// Holder is this node's name.
	Holder string
	// Duration is how long a holder keeps the Lease without renewing it.
	Duration time.Duration
	// Interval paces the tries while another node holds it
	// (DefaultLeaseInterval when 0); Clock paces them.
	Interval time.Duration
	Clock    clock.Clock
	// MaxFailed halts the rollout: once that many other holders failed
	// their work (FailedAnnotation lists them), the Lease is not taken
	// (ErrHalted) until an operator clears the list; 0 never halts.
	MaxFailed int
}

// FailedAnnotation is the Lease's annotation listing the holders whose
// work failed, comma-separated: each added at its release after a
// failure, removed at its release after a success.
const FailedAnnotation = "pullguard.dev/failed-holders"

// ErrHalted is Acquire's error when MaxFailed holders failed.
var ErrHalted = errors.New("the rollout is halted")

// failed is the Lease's list of holders that failed.
func failed(l *coordinationv1.Lease) []string {
	v := strings.TrimSpace(l.Annotations[FailedAnnotation])
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

func (l *Lease) clock() clock.Clock {
	if l.Clock == nil {
		return clock.RealClock{}
	}
	return l.Clock
}

// Acquire takes the Lease, trying again every Interval until it is free
// or ctx ends. waiting is called with the holder each time the holder
// changes while this node waits.
func (l *Lease) Acquire(ctx context.Context, waiting func(holder string)) error {
	every := l.Interval
	if every <= 0 {
		every = DefaultLeaseInterval
	}
	last := ""
	for {
		holder, err := l.try(ctx)
		switch {
		case err == nil && holder == "":
			return nil
		case errors.Is(err, ErrHalted):
			return err
		case err != nil:
			klog.ErrorS(err, "taking the lease", "lease", klog.KRef(l.Namespace, l.Name))
		case holder != last:
			last = holder
			if waiting != nil {
				waiting(holder)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for lease %s/%s: %w", l.Namespace, l.Name, ctx.Err())
		case <-l.clock().After(every):
		}
	}
}

// try takes the Lease once; it returns the other holder when one holds it.
func (l *Lease) try(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, defaultLeaseRequest)
	defer cancel()
	leases := l.Client.Leases(l.Namespace)
	now := metav1.NewMicroTime(l.clock().Now())
	cur, err := leases.Get(ctx, l.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace},
			Spec:       l.spec(now, 0),
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return "another node", nil
		}
		return "", err
	}
	if err != nil {
		return "", err
	}
	holder := ptr.Deref(cur.Spec.HolderIdentity, "")
	if holder != "" && holder != l.Holder && !l.expired(cur) {
		return holder, nil
	}
	if others := slices.DeleteFunc(failed(cur), func(h string) bool { return h == l.Holder }); l.MaxFailed > 0 && len(others) >= l.MaxFailed {
		return "", fmt.Errorf("%w: %d nodes failed (%s), the most lease %s/%s allows before it stops the rollout: see why on their pods, fix, then remove the annotation %s from the lease and restart the DaemonSet's pods",
			ErrHalted, len(others), strings.Join(others, ", "), l.Namespace, l.Name, FailedAnnotation)
	}
	transitions := ptr.Deref(cur.Spec.LeaseTransitions, 0)
	if holder != l.Holder {
		transitions++
	}
	cur.Spec = l.spec(now, transitions)
	_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return "another node", nil
	}
	return "", err
}

func (l *Lease) spec(now metav1.MicroTime, transitions int32) coordinationv1.LeaseSpec {
	return coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(l.Holder),
		LeaseDurationSeconds: ptr.To(int32(l.Duration / time.Second)),
		AcquireTime:          ptr.To(now),
		RenewTime:            ptr.To(now),
		LeaseTransitions:     ptr.To(transitions),
	}
}

// expired says whether the holder of a Lease did not renew it within its
// duration; one without a renew time or duration is expired.
func (l *Lease) expired(cur *coordinationv1.Lease) bool {
	if cur.Spec.RenewTime == nil || cur.Spec.LeaseDurationSeconds == nil {
		return true
	}
	end := cur.Spec.RenewTime.Add(time.Duration(*cur.Spec.LeaseDurationSeconds) * time.Second)
	return !l.clock().Now().Before(end)
}

// Release gives the Lease up when this node holds it, adding the holder
// to FailedAnnotation when its work failed and removing it otherwise. It
// runs even when ctx has ended (a stopped agent releases), within its own
// bound.
func (l *Lease) Release(ctx context.Context, workFailed bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultLeaseRequest)
	defer cancel()
	leases := l.Client.Leases(l.Namespace)
	var err error
	for range 3 {
		var cur *coordinationv1.Lease
		cur, err = leases.Get(ctx, l.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			break
		}
		if ptr.Deref(cur.Spec.HolderIdentity, "") != l.Holder {
			return nil
		}
		cur.Spec.HolderIdentity = nil
		list := slices.DeleteFunc(failed(cur), func(h string) bool { return h == l.Holder })
		if workFailed {
			list = append(list, l.Holder)
		}
		slices.Sort(list)
		switch {
		case len(list) > 0:
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations[FailedAnnotation] = strings.Join(list, ",")
		case cur.Annotations != nil:
			delete(cur.Annotations, FailedAnnotation)
		}
		if _, err = leases.Update(ctx, cur, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("releasing lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return nil
}

// errStopped is the agent stopped (SIGTERM) in the middle of its work.
var errStopped = errors.New("the agent was stopped")
