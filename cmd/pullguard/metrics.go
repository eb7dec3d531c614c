package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/internal/durable"
	"github.com/pullguard/pullguard/pkg/announce"
	"github.com/pullguard/pullguard/pkg/credentialprovider"
	"github.com/pullguard/pullguard/pkg/criproxy"
)

var registerOnce sync.Once

// registerMetrics registers every pullguard metric with component-base's
// legacyregistry, once per process: a one-shot run writes them with
// writeMetrics, a long-running process serves legacyregistry.Handler() on
// /metrics. Registering twice is harmless.
func registerMetrics() {
	registerOnce.Do(func() {
		for _, m := range commonMetrics() {
			if err := legacyregistry.Register(m); err != nil {
				var already prometheus.AlreadyRegisteredError
				if !errors.As(err, &already) {
					klog.Background().Error(err, "Failed to register a metric")
				}
			}
		}
		info := buildVersion()
		buildInfo.WithLabelValues(info.Major, info.Minor, info.GitVersion, info.GitCommit, info.GitTreeState, info.BuildDate, info.GoVersion, info.Compiler, info.Platform).Set(1)
	})
}

// commonMetrics are the metrics every command registers (registerMetrics);
// serve adds serveMetrics.
func commonMetrics() []metrics.Registerable {
	var all []metrics.Registerable
	all = append(all, credtracker.Metrics()...)
	all = append(all, imagemanager.Metrics()...)
	all = append(all, credentialprovider.Metrics()...)
	all = append(all, criproxy.Metrics()...)
	all = append(all, announce.Metrics()...)
	return append(all, buildInfo)
}

// serveMetrics are the metrics serve registers besides commonMetrics: its
// protection gauge (registerServeMetrics) and its CallWatch's
// (adminOptions.newCallWatch).
func serveMetrics() []metrics.Registerable {
	return append([]metrics.Registerable{serveProtection, secureServingUp}, criproxy.SilenceMetrics()...)
}

// buildInfo is the kubelet's kubernetes_build_info under pullguard's name,
// with the same labels and values: component-base registers that gauge
// (metrics.RegisterBuildInfo) under a fixed name, and would tell a
// dashboard that Kubernetes runs here.
var buildInfo = metrics.NewGaugeVec(&metrics.GaugeOpts{
	Namespace:      "pullguard",
	Name:           "build_info",
	Help:           "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which pullguard was built, and platform on which it is running.",
	StabilityLevel: metrics.ALPHA,
}, []string{"major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"})

// gatherer is legacyregistry's metrics without the families that
// k8s.io/apiserver registers there when imported (serve's secure
// endpoint imports it), which describe an API server: its audit, storage
// encryption, aggregated discovery, declarative validation and admission
// webhooks' certificates. The families its authentication and
// authorization filters register once the secure endpoint serves stay.
var gatherer prometheus.Gatherer = prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	return slices.DeleteFunc(families, func(mf *dto.MetricFamily) bool {
		return slices.ContainsFunc(apiServerFamilies, func(prefix string) bool { return strings.HasPrefix(mf.GetName(), prefix) })
	}), err
})

var apiServerFamilies = []string{"aggregator_discovery_", "apiserver_audit_", "apiserver_envelope_encryption_", "apiserver_storage_", "apiserver_validation_", "apiserver_webhooks_x509_"}

// metricsHTTPHandler serves gatherer's metrics on /metrics.
func metricsHTTPHandler() http.Handler {
	return metrics.HandlerFor(gatherer, metrics.HandlerOpts{})
}

// writeMetrics writes legacyregistry's metrics in Prometheus text format.
func writeMetrics(w io.Writer) error {
	families, err := gatherer.Gather()
	if err != nil {
		return fmt.Errorf("failed to gather metrics: %w", err)
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("failed to write metrics: %w", err)
		}
	}
	return nil
}

// writeMetricsFile writes the metrics to path, through a temporary file
// renamed into place, so a reader never sees half a file (not fsynced:
// they describe a run that is over).
func writeMetricsFile(path string) error {
	w, err := durable.Create(path, 0o600, durable.NoSync())
	if err != nil {
		return fmt.Errorf("failed to write metrics file %s: %w", path, err)
	}
	defer w.Close()
	if err := writeMetrics(w); err != nil {
		return err
	}
	if err := w.Commit(); err != nil {
		return fmt.Errorf("failed to write metrics file %s: %w", path, err)
	}
	return nil
}

// serveProtection is 1 while serve protects and 0 while it passes through.
// serve registers it, and only serve: for run it would read as a
// pass-through.
var serveProtection = metrics.NewGauge(&metrics.GaugeOpts{
	Namespace:      "pullguard",
	Subsystem:      "serve",
	Name:           "protection_enabled",
	Help:           "1 while pullguard serve enforces the protection, 0 while it is a pass-through proxy (--feature-gates KubeletEnsureSecretPulledImages=false).",
	StabilityLevel: metrics.ALPHA,
})

var registerServeOnce sync.Once

// registerServeMetrics registers serve's own gauge and sets it.
func registerServeMetrics(protecting bool) {
	registerServeOnce.Do(func() { legacyregistry.MustRegister(serveProtection) })
	if protecting {
		serveProtection.Set(1)
	} else {
		serveProtection.Set(0)
	}
}

// secureServingUp is 1 while serve's secure endpoint (--secure-port)
// serves and 0 while it is down (its port held by another process, its
// certificate unreadable: serve tries again). serve registers it only
// with --secure-port set.
var secureServingUp = metrics.NewGauge(&metrics.GaugeOpts{
	Namespace:      "pullguard",
	Name:           "secure_serving_up",
	Help:           "1 while pullguard serve's secure endpoint (--secure-port) serves /metrics and /healthz, 0 while it cannot (its port held by another process, its certificate unreadable); serve answers the kubelet either way and tries again.",
	StabilityLevel: metrics.ALPHA,
})

var registerSecureOnce sync.Once

// registerSecureServingMetric registers secureServingUp, at 0 until the
// endpoint serves.
func registerSecureServingMetric() {
	registerSecureOnce.Do(func() { legacyregistry.MustRegister(secureServingUp) })
	secureServingUp.Set(0)
}
