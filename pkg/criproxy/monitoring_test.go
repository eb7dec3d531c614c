package criproxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criproxy"
)

// gauge is the value of the proxy's gauge name (a metric of no label).
func gauge(t *testing.T, name string) float64 {
	t.Helper()
	families, err := proxyRegistry().Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1, name)
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestUnannotatedPresenceChecksCounted: a presence check taken for one of
// no particular pod (no annotation before any annotated call, or
// annotations without the kubelet's two) is counted; the kubelet's own
// presence check is not, nor its bare look-up of the container's user
// once it has shown it annotates.
func TestUnannotatedPresenceChecksCounted(t *testing.T) {
	const name = "pullguard_criproxy_unannotated_presence_checks_total"
	image := reg + "/team-a/app:v1"
	for _, tc := range []struct {
		name  string
		calls func(t *testing.T, h *harness)
		want  float64
	}{
		{"the kubelet's presence check", func(t *testing.T, h *harness) { h.present(t, image) }, 0},
		{"the kubelet's presence check, then its user look-up", func(t *testing.T, h *harness) {
			h.present(t, image)
			h.userLookup(t, image)
		}, 0},
		{"no annotation, before any annotated call", func(t *testing.T, h *harness) { h.legacyPresent(t, image) }, 1},
		{"other annotations only", func(t *testing.T, h *harness) {
			h.present(t, image)
			_, err := h.client.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: image, Annotations: map[string]string{"team": "a"}}, false)
			require.NoError(t, err)
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.fake.publish(t, image, id(3), "alice:pw")
			before := counter(t, name, nil)
			tc.calls(t, h)
			assert.Equal(t, tc.want, counter(t, name, nil)-before)
		})
	}
}

// TestAnswerWindowsGauge: the gauges show the answer windows held and
// their bound; a pull closes its pod's window, and windows past their time
// are dropped when the next one opens, so a full count is of windows a
// pull may still use.
func TestAnswerWindowsGauge(t *testing.T) {
	const bound = 8
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{serverOpts: []criproxy.Option{criproxy.WithMaxWindows(bound), criproxy.WithAnswerWindow(time.Minute)}})
	h.fake.publish(t, image, id(1), "alice:pw")
	_, err := h.pull(t, "a", image, "alice", "pw")
	require.NoError(t, err)
	assert.Equal(t, float64(bound), gauge(t, "pullguard_criproxy_answer_windows_max"))

	for range 3 {
		require.Empty(t, h.newPod("b", nil).presence(t, image), "tenant B cannot use tenant A's image")
	}
	assert.Equal(t, 3.0, gauge(t, "pullguard_criproxy_answer_windows"), "three pods of B wait for their pulls")

	_, err = h.newPod("a", nil).ensure(t, image, "alice", "pw")
	require.NoError(t, err)
	assert.Equal(t, 3.0, gauge(t, "pullguard_criproxy_answer_windows"), "A's window closed with its pull")

	h.clock.Step(2 * time.Minute)
	require.Empty(t, h.newPod("b", nil).presence(t, image))
	assert.Equal(t, 1.0, gauge(t, "pullguard_criproxy_answer_windows"), "the three windows past their time went")
	assert.Equal(t, criproxy.OpenWindows(h.server), 1)
}
