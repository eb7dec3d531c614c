package credentialprovider

import (
	"k8s.io/component-base/metrics"
)

const (
	metricsNamespace = "pullguard"
	metricsSubsystem = "credential_provider"
)

var (
	pluginDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "plugin_duration_seconds",
		Help:           "Duration of credential provider plugin runs, successful or not, by plugin.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin_name"})

	pluginErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "plugin_errors_total",
		Help:           "Failed credential provider plugin runs, by plugin and kind (timeout, canceled, start, exit, output_too_large, invalid_response, encode_request).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin_name", "kind"})

	cacheHits = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "cache_hits_total",
		Help:           "Look-ups served from a credential provider's cache, by plugin.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin_name"})

	cacheMisses = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "cache_misses_total",
		Help:           "Look-ups that a credential provider's cache could not serve, by plugin.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin_name"})
)

// Metrics returns the package's metrics for the caller to register, for
// example with legacyregistry.MustRegister(credentialprovider.Metrics()...)
// or into its own metrics.KubeRegistry. Until they are registered they
// record nothing. All are in namespace "pullguard", subsystem
// "credential_provider":
//
//   - plugin_duration_seconds{plugin_name}: histogram of plugin runs;
//   - plugin_errors_total{plugin_name,kind}: failed runs by ErrorKind;
//   - cache_hits_total{plugin_name} and cache_misses_total{plugin_name}.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{pluginDuration, pluginErrors, cacheHits, cacheMisses}
}
