package criproxy

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
)

const (
	metricsNamespace = "pullguard"
	metricsSubsystem = "criproxy"
)

var (
	requestsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "requests_total",
		Help:           "CRI image service requests by method and gRPC code.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"method", "code"})
	requestDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "request_duration_seconds",
		Help:           "Time to answer a CRI image service request, backend included, by method.",
		Buckets:        metrics.ExponentialBuckets(0.00005, 4, 12),
		StabilityLevel: metrics.ALPHA,
	}, []string{"method"})
	decisionsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "decisions_total",
		Help:           "Decisions by method, outcome (ImageStatus: present, proven, lookup, hidden; PullImage: answered, verified, forwarded, refused, timeout, unverified, failed) and the tracker's reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"method", "outcome", "reason"})
	evictionsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "evictions_total",
		Help:           "Entries serve forgot to make room, the oldest or least recently used first, by kind: window (an open answer window: the pod's pull then asks the registry), proof (a pod's proof: its next presence check costs a pull, answered from its record), name (a memoized normalized name), collision (a pod key two pods shared).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	unannotatedChecks = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "unannotated_presence_checks_total",
		Help:           "ImageStatus calls taken for presence checks of no particular pod: without the kubelet's pod annotations (kubernetes.io/config.source, kubernetes.io/config.seen) before any call with them arrived, or with other annotations only. A kubelet annotates every presence check; while these rise, serve answers per image name, not per pod.",
		StabilityLevel: metrics.ALPHA,
	})
	answerWindows = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "answer_windows",
		Help:           "Answer windows serve holds (a presence check reported a present image absent and the pod's pull has not followed yet); at pullguard_criproxy_answer_windows_max the oldest open one makes room.",
		StabilityLevel: metrics.ALPHA,
	})
	answerWindowsMax = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "answer_windows_max",
		Help:           "The most answer windows serve holds at once.",
		StabilityLevel: metrics.ALPHA,
	})
	panicsTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "panics_total",
		Help:           "Requests that panicked and were answered with Internal.",
		StabilityLevel: metrics.ALPHA,
	})
)

// Metrics returns the proxy's metrics, to register with a registry.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{requestsTotal, requestDuration, decisionsTotal, evictionsTotal, unannotatedChecks, answerWindows, answerWindowsMax, panicsTotal}
}

func observe(method string, start time.Time) {
	requestDuration.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

func countDecision(method, outcome string, r credtracker.Reason) {
	reason := ""
	if r != 0 {
		reason = r.String()
	}
	decisionsTotal.WithLabelValues(method, outcome, reason).Inc()
}

// UnaryInterceptor counts every request by method and code, and turns a
// panic into an Internal error (logged without the request, which may
// hold a credential): a malformed request never takes the daemon down.
func UnaryInterceptor(logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				panicsTotal.Inc()
				logger.Error(fmt.Errorf("panic: %v", p), "Request panicked", "method", info.FullMethod)
				resp, err = nil, status.Error(codes.Internal, "internal error in pullguard")
			}
			requestsTotal.WithLabelValues(shortMethod(info.FullMethod), status.Code(err).String()).Inc()
		}()
		return handler(ctx, req)
	}
}

// StreamInterceptor is UnaryInterceptor for streaming methods.
func StreamInterceptor(logger klog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				panicsTotal.Inc()
				logger.Error(fmt.Errorf("panic: %v", p), "Request panicked", "method", info.FullMethod)
				err = status.Error(codes.Internal, "internal error in pullguard")
			}
			requestsTotal.WithLabelValues(shortMethod(info.FullMethod), status.Code(err).String()).Inc()
		}()
		return handler(srv, ss)
	}
}

func shortMethod(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}
