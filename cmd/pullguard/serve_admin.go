package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criproxy"
)

// adminOptions are serve's flags for its admin socket and for noticing
// that the kubelet no longer calls it.
type adminOptions struct {
	adminSocket  string
	silenceBound time.Duration
}

func (o *adminOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.adminSocket, "admin-socket", defaultAdminSocket, `the unix socket on which pullguard records reads the records of this serve (mode 0600, only root is answered); "" turns it off`)
	f.DurationVar(&o.silenceBound, "silence-bound", criproxy.DefaultSilenceBound, "after this long with no CRI image service call (a kubelet makes one every 30 s at least), serve logs that it is not in the kubelet's path, says so in /healthz and sets pullguard_criproxy_silent; 0 turns it off")
}

func (o *adminOptions) check() error {
	if o.silenceBound != 0 && o.silenceBound < time.Second {
		return fmt.Errorf("--silence-bound must be 0 (off) or at least 1s, got %s", o.silenceBound)
	}
	return nil
}

var registerSilenceOnce sync.Once

// newCallWatch returns the watch that notices silence on the image
// service (nil when --silence-bound is 0) and the gRPC server option that
// shows it every call. Its Run starts once serve serves.
func (o *adminOptions) newCallWatch(withMetrics bool, logger klog.Logger) (*criproxy.CallWatch, []grpc.ServerOption) {
	if o.silenceBound == 0 {
		return nil, nil
	}
	if withMetrics {
		registerSilenceOnce.Do(func() { legacyregistry.MustRegister(criproxy.SilenceMetrics()...) })
	}
	w := criproxy.NewCallWatch(clock.RealClock{}, o.silenceBound, logger)
	return w, []grpc.ServerOption{grpc.ChainUnaryInterceptor(w.UnaryInterceptor())}
}

// startAdmin serves the records on --admin-socket, unless it is "": the
// returned func stops it. An admin socket that cannot be served is logged,
// not fatal: serve stays in the kubelet's path, and records then says
// that serve does not answer.
func (o *adminOptions) startAdmin(rootDir string, tr credtracker.Tracker, protecting bool, logger klog.Logger) func() {
	if o.adminSocket == "" {
		return func() {}
	}
	stop, err := serveAdmin(o.adminSocket, &adminServer{rootDir: rootDir, tracker: tr, protecting: protecting, logger: logger})
	if err != nil {
		logger.Error(err, "Failed to serve the admin socket: pullguard records cannot read the records while serve runs")
		return func() {}
	}
	return stop
}

// healthzSilence is the line /healthz adds to its body while no image
// service call arrives: the status stays 200, as /healthz is serve's
// liveness, and restarting serve brings no kubelet back.
func healthzSilence(w *criproxy.CallWatch) string {
	if w == nil {
		return ""
	}
	st := w.Status()
	if !st.Silent {
		return ""
	}
	since := "since serve started at"
	if st.Calls {
		since = "since the last one, at"
	}
	return fmt.Sprintf("\n%s: no CRI image service call for %s or more, %s %s: is the kubelet's imageServiceEndpoint still serve's socket?",
		healthzSilent, st.Bound, since, st.Last.UTC().Format(time.RFC3339))
}

// healthzSilent opens /healthz's line that says no image service call
// arrives.
const healthzSilent = "warning: not in the kubelet's path"

// healthzFunc is /healthz's body while the backend answers.
func healthzFunc(body string, w *criproxy.CallWatch, secure *secureStatus) func() string {
	return func() string { return body + healthzSilence(w) + secure.healthz() }
}
