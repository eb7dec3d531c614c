package credentialprovider

import (
	"k8s.io/component-base/metrics"
)

const (
	metricsNamespace = "pullguard"
	metricsSubsystem = "credential_provider"
)

var (
	pluginDurationOwn = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "plugin_duration_seconds",
		Help:           "Duration of credential provider plugin runs, successful or not, by plugin.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin_name"})

	pluginErrorsOwn = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "plugin_errors_total",
		Help:           "Failed credential provider plugin runs, by plugin and kind (timeout, canceled, start, exit, output_too_large, invalid_response, encode_request).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin_name", "kind"})

	// The kubelet's names (pkg/credentialprovider/plugin), so that
	// dashboards made for the kubelet work unchanged.
	kubeletPluginDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      "kubelet",
		Name:           "credential_provider_plugin_duration",
		Help:           "Duration of execution in seconds for credential provider plugin.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin_name"})

	kubeletPluginErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "kubelet",
		Name:           "credential_provider_plugin_errors_total",
		Help:           "Number of errors from credential provider plugin.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin_name"})

	// pluginDuration and pluginErrors record under both names.
	pluginDuration = twinHistogramVec{}
	pluginErrors   = twinErrorsVec{}

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
//   - cache_hits_total{plugin_name} and cache_misses_total{plugin_name};
//
// and, under the kubelet's names, kubelet_credential_provider_plugin_duration
// and kubelet_credential_provider_plugin_errors_total{plugin_name}.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{pluginDurationOwn, pluginErrorsOwn, kubeletPluginDuration, kubeletPluginErrors, cacheHits, cacheMisses}
}

type observer interface{ Observe(float64) }

type twinObserver struct{ a, b observer }

func (t twinObserver) Observe(v float64) {
	t.a.Observe(v)
	t.b.Observe(v)
}

type twinHistogramVec struct{}

func (twinHistogramVec) WithLabelValues(plugin string) observer {
	return twinObserver{pluginDurationOwn.WithLabelValues(plugin), kubeletPluginDuration.WithLabelValues(plugin)}
}

type incer interface{ Inc() }

type twinIncer struct{ a, b incer }

func (t twinIncer) Inc() {
	t.a.Inc()
	t.b.Inc()
}

type twinErrorsVec struct{}

// WithLabelValues counts an error by plugin and kind, and by plugin alone
// under the kubelet's name.
func (twinErrorsVec) WithLabelValues(plugin, kind string) incer {
	return twinIncer{pluginErrorsOwn.WithLabelValues(plugin, kind), kubeletPluginErrors.WithLabelValues(plugin)}
}
