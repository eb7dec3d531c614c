package imagemanager

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"

	"github.com/pullguard/pullguard/credtracker"
)

var (
	ensureRequestsOwn = metrics.NewCounterVec(&metrics.CounterOpts{
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

	// The kubelet's names (pkg/kubelet/images and its pullmanager), so
	// that dashboards made for the kubelet work unchanged.
	kubeletEnsureRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "kubelet_image_manager",
		Name:           "ensure_image_requests_total",
		Help:           "Number of ensure-image requests, as the kubelet counts them (pull_policy in lower case).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"pull_policy", "present_locally", "pull_required"})

	kubeletMustPullChecks = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "kubelet_imagemanager",
		Name:           "image_mustpull_checks_total",
		Help:           "Checks whether the credentials for a present image must be verified, by the kubelet's result: credentialPolicyAllowed, credentialRecordFound, mustAuthenticate or error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// ensureRequests counts under both names.
	ensureRequests = twinCounterVec{}
)

// Metrics returns the package's metrics, for the caller to register.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{ensureRequestsOwn, pullDuration, kubeletEnsureRequests, kubeletMustPullChecks}
}

// twinCounterVec counts an ensure request under pullguard's name and the
// kubelet's.
type twinCounterVec struct{}

func (twinCounterVec) WithLabelValues(policy, present, required string) counterIncer {
	return twinCounter{
		ensureRequestsOwn.WithLabelValues(policy, present, required),
		kubeletEnsureRequests.WithLabelValues(strings.ToLower(policy), present, required),
	}
}

type counterIncer interface{ Inc() }

type twinCounter struct{ a, b counterIncer }

func (t twinCounter) Inc() {
	t.a.Inc()
	t.b.Inc()
}

// The kubelet's results for image_mustpull_checks_total.
const (
	mustPullPolicyAllowed = "credentialPolicyAllowed"
	mustPullRecordFound   = "credentialRecordFound"
	mustPullAuthenticate  = "mustAuthenticate"
	mustPullError         = "error"
	mustPullNotApplicable = ""
)

// mustPullResult maps a decision on a present image to the kubelet's
// result label; "" for decisions the kubelet does not count (an absent
// image, policy Always, the feature off).
func mustPullResult(d credtracker.Decision) string {
	switch d.Reason {
	case credtracker.ReasonPolicyNeverVerify, credtracker.ReasonPreloaded, credtracker.ReasonAllowlisted, credtracker.ReasonNodeAccessible:
		return mustPullPolicyAllowed
	case credtracker.ReasonCredentialMatch, credtracker.ReasonSecretRotated, credtracker.ReasonServiceAccount:
		return mustPullRecordFound
	case credtracker.ReasonNotAllowlisted, credtracker.ReasonAlwaysVerify, credtracker.ReasonNoMatch, credtracker.ReasonExpired,
		credtracker.ReasonPullInFlight, credtracker.ReasonUnknownOrigin, credtracker.ReasonRecordsUnreadable, credtracker.ReasonUnlistedName:
		return mustPullAuthenticate
	case credtracker.ReasonInvalidImageName:
		return mustPullError
	}
	return mustPullNotApplicable
}

// countEnsure counts one EnsureImageExists decision.
func countEnsure(policy corev1.PullPolicy, present bool, d credtracker.Decision) {
	ensureRequests.WithLabelValues(string(policy), strconv.FormatBool(present), strconv.FormatBool(d.Action == credtracker.Pull)).Inc()
	if r := mustPullResult(d); r != "" && present {
		kubeletMustPullChecks.WithLabelValues(r).Inc()
	}
}
