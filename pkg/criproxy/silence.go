package criproxy

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultSilenceBound is how long serve waits for an image-service call
// before it says that none arrives. A kubelet that uses serve calls it
// every 30 s at least (its image garbage collector refreshes its image
// list with ListImages that often) and, with eviction thresholds set (the
// default), every 10 s (its eviction manager reads the image
// filesystem's stats, ImageFsInfo): 2 minutes are four of the longest
// periods.
const DefaultSilenceBound = 2 * time.Minute

var (
	lastCallGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "last_request_timestamp_seconds",
		Help:           "When the last CRI image service request arrived (Unix time; serve's start until the first one). A kubelet calls its image service every few seconds: an alert on time() minus this finds a kubelet that no longer goes through serve.",
		StabilityLevel: metrics.ALPHA,
	})
	silentGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "silent",
		Help:           "1 while no CRI image service request has arrived for --silence-bound (is the kubelet's imageServiceEndpoint still serve's socket?), 0 otherwise.",
		StabilityLevel: metrics.ALPHA,
	})
)

// SilenceMetrics returns CallWatch's metrics, to register with a
// registry. Only a daemon that runs a CallWatch registers them.
func SilenceMetrics() []metrics.Registerable {
	return []metrics.Registerable{lastCallGauge, silentGauge}
}

// CallWatch notices when no image-service call arrives: a kubelet whose
// configuration was rewritten to point at the runtime again takes serve
// out of its path without a word, and serve then sees no call at all.
// Every call counts, whoever makes it: the kubelet's carry no identity,
// so an operator's crictl counts as the kubelet.
//
// It is safe for concurrent use.
type CallWatch struct {
	clock  clock.WithTicker
	bound  time.Duration
	logger klog.Logger

	mu     sync.Mutex
	last   time.Time
	calls  bool
	silent bool
}

// SilenceStatus is what a CallWatch knows.
type SilenceStatus struct {
	// Silent is true when no call arrived for the bound.
	Silent bool
	// Last is when the last call arrived (the watch's start until one
	// does); Calls says whether any did.
	Last  time.Time
	Calls bool
	// Bound is the watch's bound.
	Bound time.Duration
}

// NewCallWatch returns a CallWatch that reports a silence of bound or
// more, starting now (by clk).
func NewCallWatch(clk clock.WithTicker, bound time.Duration, logger klog.Logger) *CallWatch {
	w := &CallWatch{clock: clk, bound: bound, logger: logger, last: clk.Now()}
	lastCallGauge.Set(float64(w.last.UnixNano()) / 1e9)
	silentGauge.Set(0)
	return w
}

// Seen records a call; after a silence, it logs that calls resumed.
func (w *CallWatch) Seen() {
	now := w.clock.Now()
	w.mu.Lock()
	last, was := w.last, w.silent
	w.last, w.silent = now, false
	w.calls = true
	w.mu.Unlock()
	lastCallGauge.Set(float64(now.UnixNano()) / 1e9)
	if was {
		silentGauge.Set(0)
		w.logger.Info("Image service calls resumed", "silentFor", now.Sub(last).Round(time.Second))
	}
}

// Status reports whether the image service is silent now.
func (w *CallWatch) Status() SilenceStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return SilenceStatus{Silent: w.silent, Last: w.last, Calls: w.calls, Bound: w.bound}
}

// Run checks for a silence until ctx is done, every quarter of the bound
// (at most every 10 s, at least every millisecond): it logs one warning
// when one starts. Until a call arrives, the silence counts from Run's
// start: the caller runs it once it serves, so that the time it waited
// before (for its runtime), when no kubelet could call, is no silence.
func (w *CallWatch) Run(ctx context.Context) {
	now := w.clock.Now()
	w.mu.Lock()
	started := !w.calls
	if started {
		w.last = now
	}
	w.mu.Unlock()
	if started {
		lastCallGauge.Set(float64(now.UnixNano()) / 1e9)
	}
	t := w.clock.NewTicker(max(time.Millisecond, min(w.bound/4, 10*time.Second)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			w.check()
		}
	}
}

// check marks the silence and warns once when the last call is older
// than the bound.
func (w *CallWatch) check() {
	now := w.clock.Now()
	w.mu.Lock()
	last, calls := w.last, w.calls
	start := !w.silent && now.Sub(last) >= w.bound
	if start {
		w.silent = true
	}
	w.mu.Unlock()
	if !start {
		return
	}
	silentGauge.Set(1)
	since := "since serve started"
	if calls {
		since = "since the last one"
	}
	w.logger.Error(nil, "No image service call "+since+": serve is not in the kubelet's path, is the kubelet's imageServiceEndpoint still serve's socket? A kubelet calls its image service every 30 s at least",
		"silentFor", now.Sub(last).Round(time.Second), "last", last.UTC().Format(time.RFC3339))
}

// UnaryInterceptor records every unary call, before it is handled.
func (w *CallWatch) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		w.Seen()
		return handler(ctx, req)
	}
}
