package criproxy_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/pullguard/pullguard/pkg/criproxy"
)

// The proxy's metrics are package-wide: they are registered once, before
// the first test that reads them acts, and a test reads differences.
var (
	metricsOnce     sync.Once
	metricsRegistry metrics.KubeRegistry
)

// proxyRegistry holds the proxy's metrics, registered at the first call.
func proxyRegistry() metrics.KubeRegistry {
	metricsOnce.Do(func() {
		metricsRegistry = metrics.NewKubeRegistry()
		metricsRegistry.MustRegister(criproxy.Metrics()...)
	})
	return metricsRegistry
}

// counter is the sum of the proxy's counter name over the series whose
// labels include labels.
func counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := proxyRegistry().Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if testutil.LabelsMatch(m, labels) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func evictions(t *testing.T, kind string) float64 {
	return counter(t, "pullguard_criproxy_evictions_total", map[string]string{"kind": kind})
}

func decisions(t *testing.T, method, outcome string) float64 {
	return counter(t, "pullguard_criproxy_decisions_total", map[string]string{"method": method, "outcome": outcome})
}

// TestFloodKeepsOtherPodsAnswers: one tenant's pods flood serve past its
// bound (here 40 windows and 80 proofs), with answer windows (pods of
// Never containers naming a present image they cannot use: each presence
// check opens a window that no pull closes) or with proofs (pods that
// pull an image they may use). Before the flood's end, another tenant's
// pod opened its window, or used its proof. The oldest windows, and the
// least recently used proofs, make room one at a time, and are counted;
// the other pod keeps its window (its pull is answered from its record,
// with no registry contact) or its proof (its presence check is answered
// from it, with no pull). Clearing a full map whole, as serve did before,
// fails both.
func TestFloodKeepsOtherPodsAnswers(t *testing.T) {
	const bound = 40
	victimImage, floodImage := reg+"/team-a/app:v1", reg+"/team-c/tool:v1"
	for _, tc := range []struct {
		name string
		kind string
		// floodPod makes one flooding pod's calls.
		floodPod func(t *testing.T, h *harness)
		// victim makes the other pod's calls before the flood's second
		// half; check, after it, those that must be answered.
		victim func(t *testing.T, h *harness, p *kubeletPod)
		check  func(t *testing.T, h *harness, p *kubeletPod)
		// wantEvicted is how many entries made room: 1.5 bound windows
		// opened; 3 bound + 4 proofs kept (2 per pull: 2 pulls before,
		// the other pod's, 1.5 bound - 1 flooding pods').
		wantEvicted float64
	}{
		{
			name: "windows", kind: "window", wantEvicted: bound / 2,
			floodPod: func(t *testing.T, h *harness) {
				require.Empty(t, h.newPod("b", nil).presence(t, floodImage), "tenant B cannot use tenant C's image")
			},
			victim: func(t *testing.T, h *harness, p *kubeletPod) {
				require.Empty(t, p.presence(t, victimImage), "its presence check: a new pod shows nothing")
			},
			check: func(t *testing.T, h *harness, p *kubeletPod) {
				answered := decisions(t, "PullImage", "answered")
				m0, _, pulls0 := h.fake.counts()
				ref, err := p.pullOnly(t, victimImage, "alice", "pw")
				require.NoError(t, err)
				assert.Equal(t, id(1), ref)
				m1, _, pulls1 := h.fake.counts()
				assert.Zero(t, m1-m0, "registry requests of the pull")
				assert.Zero(t, pulls1-pulls0, "runtime pulls")
				assert.Equal(t, 1.0, decisions(t, "PullImage", "answered")-answered, "answered from the record")
			},
		},
		{
			name: "proofs", kind: "proof", wantEvicted: bound + 4,
			floodPod: func(t *testing.T, h *harness) {
				_, err := h.newPod("c", nil).ensure(t, floodImage, "carol", "pw")
				require.NoError(t, err)
			},
			victim: func(t *testing.T, h *harness, p *kubeletPod) {
				require.Equal(t, id(1), p.presence(t, victimImage), "its proof answers (a restarted container, an image volume's sync)")
			},
			check: func(t *testing.T, h *harness, p *kubeletPod) {
				proven := decisions(t, "ImageStatus", "proven")
				_, _, pulls0 := h.fake.counts()
				assert.Equal(t, id(1), p.presence(t, victimImage), "answered from its proof")
				_, _, pulls1 := h.fake.counts()
				assert.Zero(t, pulls1-pulls0, "runtime pulls")
				assert.Equal(t, 1.0, decisions(t, "ImageStatus", "proven")-proven)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{serverOpts: []criproxy.Option{criproxy.WithMaxWindows(bound)}})
			h.fake.publish(t, victimImage, id(1), "alice:pw")
			h.fake.publish(t, floodImage, id(2), "carol:pw")
			_, err := h.pull(t, "a", victimImage, "alice", "pw")
			require.NoError(t, err)
			_, err = h.pull(t, "c", floodImage, "carol", "pw")
			require.NoError(t, err)
			p := h.newPod("a", nil)
			if tc.kind == "proof" {
				_, err := p.ensure(t, victimImage, "alice", "pw")
				require.NoError(t, err)
			}
			evicted := evictions(t, tc.kind)

			for range bound - 1 {
				tc.floodPod(t, h)
			}
			tc.victim(t, h, p)
			for range bound / 2 {
				tc.floodPod(t, h)
			}
			assert.LessOrEqual(t, criproxy.OpenWindows(h.server), bound, "windows kept")
			tc.check(t, h, p)
			assert.Equal(t, tc.wantEvicted, evictions(t, tc.kind)-evicted, "entries that made room")
		})
	}
}
