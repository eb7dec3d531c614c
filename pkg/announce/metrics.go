package announce

import "k8s.io/component-base/metrics"

const (
	metricsNamespace = "pullguard"
	metricsSubsystem = "announce"
)

var (
	announced = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "credentials",
		Help:           "Announced node credentials (keyed hashes from wrapped credential provider plugins) that serve read at its last reading of the directory and that had not expired.",
		StabilityLevel: metrics.ALPHA,
	})
	reloads = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "reloads_total",
		Help:           "Readings of the announcement directory (each after it changed, or while its last change is under 2 seconds old).",
		StabilityLevel: metrics.ALPHA,
	})
	refused = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "refused_total",
		Help:           "Problems that made serve refuse announcements (an owner other than root, a mode that lets others write, a symbolic link, an invalid file), each counted when first found; serve's log names the path and the reason.",
		StabilityLevel: metrics.ALPHA,
	})
	matches = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "matches_total",
		Help:           "Pulls whose credential serve recognised as announced by a wrapped credential provider plugin, counted when the pull starts (a pull that succeeds is recorded as the node's), by plugin.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin_name"})
)

// Metrics returns the package's metrics for the caller to register (see
// credentialprovider.Metrics). Namespace "pullguard", subsystem
// "announce": credentials (gauge), reloads_total, refused_total and
// matches_total{plugin_name}.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{announced, reloads, refused, matches}
}
