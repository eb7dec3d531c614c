package credentialprovider_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

func TestMetrics(t *testing.T) {
	reg := metrics.NewKubeRegistry()
	reg.MustRegister(cp.Metrics()...)

	e := newEnv(t)
	m := e.manager(t, []cp.Provider{
		e.provider("metrics-good", []string{"registry.example"}, time.Minute),
		e.provider("metrics-crash", []string{"registry.example"}, time.Minute, "-mode", "crash"),
	})
	kr := m.ForPod(cp.PodInfo{})
	for range 3 {
		_, _ = kr.Lookup(bg, "registry.example/app")
	}

	counter := func(name, plugin string) float64 {
		t.Helper()
		vals, err := testutil.GetCounterValuesFromGatherer(reg, "pullguard_credential_provider_"+name, map[string]string{"plugin_name": plugin}, "plugin_name")
		require.NoError(t, err)
		return vals[plugin]
	}
	tests := []struct {
		name   string
		metric string
		plugin string
		want   float64
	}{
		{name: "good: first look-up misses", metric: "cache_misses_total", plugin: "metrics-good", want: 1},
		{name: "good: later look-ups hit", metric: "cache_hits_total", plugin: "metrics-good", want: 2},
		{name: "crash: every look-up misses", metric: "cache_misses_total", plugin: "metrics-crash", want: 3},
		{name: "crash: never hits", metric: "cache_hits_total", plugin: "metrics-crash", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, counter(tt.metric, tt.plugin))
		})
	}

	t.Run("errors by kind: the crash ran once (negative cache)", func(t *testing.T) {
		vals, err := testutil.GetCounterValuesFromGatherer(reg, "pullguard_credential_provider_plugin_errors_total",
			map[string]string{"plugin_name": "metrics-crash"}, "kind")
		require.NoError(t, err)
		assert.Equal(t, map[string]float64{"exit": 1}, vals)
	})
	t.Run("duration observed once per run", func(t *testing.T) {
		for _, plugin := range []string{"metrics-good", "metrics-crash"} {
			h, err := testutil.GetHistogramVecFromGatherer(reg, "pullguard_credential_provider_plugin_duration_seconds", map[string]string{"plugin_name": plugin})
			require.NoError(t, err)
			assert.Equal(t, uint64(1), h.GetAggregatedSampleCount(), plugin)
		}
	})
}
