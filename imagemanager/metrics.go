package imagemanager

import "k8s.io/component-base/metrics"

var (
	ensureRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "pullguard",
		Subsystem:      "imagemanager",
		Name:           "ensure_image_requests_total",
		Help:           "EnsureImageExists calls by pull policy, whether the image was present, and whether a pull was required.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"pull_policy", "present_locally", "pull_required"})

	pullDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "pullguard",
		Subsystem:      "imagemanager",
		Name:           "image_pull_duration_seconds",
		Help:           "Duration of image pulls, including waiting for a pull slot, by result.",
		Buckets:        metrics.ExponentialBuckets(0.005, 2.5, 12),
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
)

// Metrics returns the package's metrics, for the caller to register.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{ensureRequests, pullDuration}
}
