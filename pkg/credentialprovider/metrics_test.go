package credentialprovider_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

var metricsRun int

func TestMetrics(t *testing.T) {
	reg := metrics.NewKubeRegistry()
	reg.MustRegister(cp.Metrics()...)

	// The metrics are package-wide: names unique to this run keep the
	// counts exact under -count=N.
	metricsRun++
	goodName, crashName := fmt.Sprintf("metrics-good-%d", metricsRun), fmt.Sprintf("metrics-crash-%d", metricsRun)
	e := newEnv(t)
	m := e.manager(t, []cp.Provider{
		e.provider(goodName, []string{"registry.example"}, time.Minute),
		e.provider(crashName, []string{"registry.example"}, time.Minute, "-mode", "crash"),
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
		{name: "good: first look-up misses", metric: "cache_misses_total", plugin: goodName, want: 1},
		{name: "good: later look-ups hit", metric: "cache_hits_total", plugin: goodName, want: 2},
		{name: "crash: every look-up misses", metric: "cache_misses_total", plugin: crashName, want: 3},
		{name: "crash: never hits", metric: "cache_hits_total", plugin: crashName, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, counter(tt.metric, tt.plugin))
		})
	}

	t.Run("errors by kind: the crash ran once (negative cache)", func(t *testing.T) {
		vals, err := testutil.GetCounterValuesFromGatherer(reg, "pullguard_credential_provider_plugin_errors_total",
			map[string]string{"plugin_name": crashName}, "kind")
		require.NoError(t, err)
		assert.Equal(t, map[string]float64{"exit": 1}, vals)
	})
	t.Run("duration observed once per run", func(t *testing.T) {
		for _, plugin := range []string{goodName, crashName} {
			h, err := testutil.GetHistogramVecFromGatherer(reg, "pullguard_credential_provider_plugin_duration_seconds", map[string]string{"plugin_name": plugin})
			require.NoError(t, err)
			assert.Equal(t, uint64(1), h.GetAggregatedSampleCount(), plugin)
		}
	})
	t.Run("the kubelet's names count the same", func(t *testing.T) {
		vals, err := testutil.GetCounterValuesFromGatherer(reg, "kubelet_credential_provider_plugin_errors_total",
			map[string]string{"plugin_name": crashName}, "plugin_name")
		require.NoError(t, err)
		assert.Equal(t, map[string]float64{crashName: 1}, vals)
		for _, plugin := range []string{goodName, crashName} {
			h, err := testutil.GetHistogramVecFromGatherer(reg, "kubelet_credential_provider_plugin_duration", map[string]string{"plugin_name": plugin})
			require.NoError(t, err)
			assert.Equal(t, uint64(1), h.GetAggregatedSampleCount(), plugin)
		}
	})
}
