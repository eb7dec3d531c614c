package imagemanager_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pullguard/pullguard/imagemanager"
)

// objectRecorder is a record.EventRecorder fake that keeps the object of
// every event.
type objectRecorder struct {
	mu     sync.Mutex
	events []recorded
}

type recorded struct {
	obj                  runtime.Object
	typ, reason, message string
}

func (r *objectRecorder) Event(obj runtime.Object, typ, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, recorded{obj, typ, reason, message})
}
func (r *objectRecorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, format)
}
func (r *objectRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, format)
}

func (r *objectRecorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// TestEventsAsTheKubelet: the kubelet's image events (reason, type and
// message written in as data from pkg/kubelet/images), recorded on the
// container's field path through client-go's tools/reference.
func TestEventsAsTheKubelet(t *testing.T) {
	type want struct{ typ, reason, prefix string }
	tests := []struct {
		name      string
		container string
		init      bool
		image     string
		policy    corev1.PullPolicy
		runs      int // EnsureImageExists calls; the events of the last are checked
		wantPath  string
		want      []want
		wantMsg   string // prefix of the last Result.Message
	}{
		{
			name: "pull", container: "app", image: pubImage, policy: corev1.PullIfNotPresent, runs: 1,
			wantPath: "spec.containers{app}",
			want: []want{{"Normal", "Pulling", `Pulling image "` + pubImage + `"`},
				{"Normal", "Pulled", `Successfully pulled image "` + pubImage + `" in `}},
		},
		{
			name: "init container", container: "setup", init: true, image: pubImage, policy: corev1.PullIfNotPresent, runs: 1,
			wantPath: "spec.initContainers{setup}",
			want:     []want{{"Normal", "Pulling", `Pulling image "`}, {"Normal", "Pulled", `Successfully pulled image "`}},
		},
		{
			name: "failed pull", container: "app", image: privImage, policy: corev1.PullIfNotPresent, runs: 1,
			wantPath: "spec.containers{app}",
			want:     []want{{"Normal", "Pulling", `Pulling image "`}, {"Warning", "Failed", `Failed to pull image "` + privImage + `": `}},
		},
		{
			name: "back-off carries the previous error in the message, not in the event", container: "app", image: privImage, policy: corev1.PullIfNotPresent, runs: 2,
			wantPath: "spec.containers{app}",
			want:     []want{{"Normal", "BackOff", `Back-off pulling image "` + privImage + `"`}},
			wantMsg:  `Back-off pulling image "` + privImage + `": ErrImagePull: `,
		},
		{
			name: "never pull", container: "app", image: privImage, policy: corev1.PullNever, runs: 1,
			wantPath: "spec.containers{app}",
			want:     []want{{"Warning", "ErrImageNeverPull", `Container image "` + privImage + `" is not present with pull policy of Never`}},
		},
		{
			name: "invalid name", container: "app", image: "UPPER/Case", policy: corev1.PullIfNotPresent, runs: 1,
			wantPath: "spec.containers{app}",
			want:     []want{{"Warning", "InspectFailed", `Failed to apply default image tag "UPPER/Case": couldn't parse image name "UPPER/Case": `}},
		},
		{
			name: "no container name: on the pod", image: pubImage, policy: corev1.PullIfNotPresent, runs: 1,
			want: []want{{"Normal", "Pulling", `Pulling image "`}, {"Normal", "Pulled", `Successfully pulled image "`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, true)
			rec := &objectRecorder{}
			m, err := imagemanager.New(e.rt, e.tr, rec, imagemanager.WithClock(e.clock))
			require.NoError(t, err)
			p := pod("team-b", "p1")
			var res imagemanager.Result
			for i := 0; i < tt.runs; i++ {
				rec.take()
				res, _ = m.EnsureImageExists(context.Background(), imagemanager.Request{Pod: p, Container: tt.container, InitContainer: tt.init, Image: tt.image, PullPolicy: tt.policy})
				e.clock.Step(time.Second)
			}
			got := rec.take()
			require.Len(t, got, len(tt.want))
			for i, w := range tt.want {
				assert.Equal(t, w.typ, got[i].typ)
				assert.Equal(t, w.reason, got[i].reason)
				assert.True(t, strings.HasPrefix(got[i].message, w.prefix), "%q does not start with %q", got[i].message, w.prefix)
				if tt.wantPath == "" {
					assert.Same(t, p, got[i].obj)
					continue
				}
				ref, ok := got[i].obj.(*corev1.ObjectReference)
				require.True(t, ok, "event on %T, want an object reference", got[i].obj)
				assert.Equal(t, corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "team-b", Name: "p1", UID: p.UID, FieldPath: tt.wantPath}, *ref)
			}
			if tt.wantMsg != "" {
				assert.True(t, strings.HasPrefix(res.Message, tt.wantMsg), res.Message)
			}
		})
	}
}
