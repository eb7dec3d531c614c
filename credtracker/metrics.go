package credtracker

import (
	"sync/atomic"

	"k8s.io/component-base/metrics"
)

const (
	metricsNamespace = "pullguard"
	metricsSubsystem = "credtracker"
	// kubeletImageManagerSubsystem is the kubelet's subsystem for the
	// same measures ("kubelet_imagemanager_...").
	kubeletImageManagerSubsystem = "kubelet_imagemanager"
)

var (
	checksTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "checks_total",
		Help:           "Image decisions by action (use, pull, never_pull) and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"action", "reason"})

	recordsGaugeVec = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "records",
		Help:           "Image pulled records, on disk and in memory.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"location"})

	intentsOwnGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "pull_intents",
		Help:           "Image pull intents not yet resolved.",
		StabilityLevel: metrics.ALPHA,
	})

	unreadableTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "unreadable_records_total",
		Help:           "Records found unreadable and set aside; their images require verification.",
		StabilityLevel: metrics.ALPHA,
	})

	recoveriesTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "store_recoveries_total",
		Help:           "Times the record store could not be read and was rebuilt from the runtime's image list.",
		StabilityLevel: metrics.ALPHA,
	})

	integrityFailuresTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "store_integrity_failures_total",
		Help:           "Times the record store failed an integrity check at start-up, by check (structure, seal, generation, missing, decode); each is followed by a recovery.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"check"})

	storeErrorsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "store_errors_total",
		Help:           "Failed writes to the record store, by operation.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation"})

	// The kubelet's names for the same gauges (pkg/kubelet/images/pullmanager),
	// so that dashboards made for the kubelet work unchanged.
	kubeletOnDiskRecords = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      kubeletImageManagerSubsystem,
		Name:           "ondisk_pulledrecords",
		Help:           "Number of ImagePulledRecords stored on disk (the kubelet's name for pullguard_credtracker_records{location=\"disk\"}).",
		StabilityLevel: metrics.ALPHA,
	})
	kubeletOnDiskIntents = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      kubeletImageManagerSubsystem,
		Name:           "ondisk_pullintents",
		Help:           "Number of ImagePullIntents stored on disk (the kubelet's name for pullguard_credtracker_pull_intents).",
		StabilityLevel: metrics.ALPHA,
	})

	// recordsGauge and intentsGauge set pullguard's gauge and its kubelet
	// twin together.
	recordsGauge = twinGaugeVec{own: recordsGaugeVec, twinLabel: "disk", twin: kubeletOnDiskRecords}
	intentsGauge = twinGauge{intentsOwnGauge, kubeletOnDiskIntents}

	storeBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "store_bytes",
		Help:           "Bytes of the record store file in use (its pages up to the highest one in use), at its opening and after each write. A store file larger than pullguard_credtracker_store_max_bytes is not read at start-up: it is set aside and rebuilt, and every present image is verified again.",
		StabilityLevel: metrics.ALPHA,
	})
	storeMaxBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "store_max_bytes",
		Help:           "The largest record store file start-up reads.",
		StabilityLevel: metrics.ALPHA,
	})

	writeDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "write_duration_seconds",
		Help:           "Duration of durable record store writes.",
		Buckets:        metrics.ExponentialBuckets(0.0005, 2, 12),
		StabilityLevel: metrics.ALPHA,
	})
)

// numActions bounds Action values, for the resolved counter table.
const numActions = 4

// checkCounters holds the checks_total child of every (action, reason),
// resolved once the metric is registered, so that a decision counts with
// one atomic add and no label hashing.
var checkCounters atomic.Pointer[[numActions][numReasons]metrics.CounterMetric]

func countCheck(d Decision) {
	if t := checkCounters.Load(); t != nil {
		t[d.Action][d.Reason].Inc()
		return
	}
	if !checksTotal.IsCreated() {
		return // not registered: nothing to count
	}
	var t [numActions][numReasons]metrics.CounterMetric
	for a := range t {
		for r := range t[a] {
			t[a][r] = checksTotal.WithLabelValues(Action(a).String(), Reason(r).String())
		}
	}
	checkCounters.Store(&t)
	t[d.Action][d.Reason].Inc()
}

// Metrics returns the package's metrics, for the caller to register (for
// example with legacyregistry.MustRegister). Unregistered metrics record
// nothing.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{checksTotal, recordsGaugeVec, intentsOwnGauge, kubeletOnDiskRecords, kubeletOnDiskIntents, unreadableTotal, recoveriesTotal, integrityFailuresTotal, storeErrorsTotal, storeBytes, storeMaxBytes, writeDuration}
}

// gaugeSetter is what the tracker does with a gauge.
type gaugeSetter interface{ Set(float64) }

// twinGauge sets a gauge and its kubelet-named twin.
type twinGauge struct{ own, twin *metrics.Gauge }

func (g twinGauge) Set(v float64) {
	g.own.Set(v)
	g.twin.Set(v)
}

// twinGaugeVec is a gauge vector whose child for twinLabel also sets twin.
type twinGaugeVec struct {
	own       *metrics.GaugeVec
	twinLabel string
	twin      *metrics.Gauge
}

func (v twinGaugeVec) WithLabelValues(label string) gaugeSetter {
	child := v.own.WithLabelValues(label)
	if label != v.twinLabel {
		return child
	}
	return twinSetter{child, v.twin}
}

type twinSetter struct{ a, b gaugeSetter }

func (t twinSetter) Set(v float64) {
	t.a.Set(v)
	t.b.Set(v)
}
