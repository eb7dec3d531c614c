package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// healthzSecureDown opens /healthz's line that says the secure endpoint
// is down. /healthz still answers 200: the endpoint is for monitoring,
// and a liveness probe must not restart serve, the kubelet's image
// service, for it.
const healthzSecureDown = "warning: secure endpoint down"

// secureStatus is the secure endpoint's state as serve shows it: the
// pullguard_secure_serving_up gauge and a line of /healthz. A nil
// *secureStatus is an endpoint that is off.
type secureStatus struct {
	addr string
	mu   sync.Mutex
	err  error
}

// report is secureserving.Options.Run's report: nil once up, else why not.
func (s *secureStatus) report(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	if err == nil {
		secureServingUp.Set(1)
	} else {
		secureServingUp.Set(0)
	}
}

// healthz is /healthz's line about the endpoint: nothing while it serves
// (or has not failed yet), else why it is down.
func (s *secureStatus) healthz() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return ""
	}
	return fmt.Sprintf("\n%s: %s: %v; serve answers the kubelet and tries again (pullguard_secure_serving_up 0)", healthzSecureDown, s.addr, s.err)
}

// startSecure starts the secure endpoint in the background, when
// --secure-port is set: it binds the port and loads or generates its
// certificate, and tries again while it cannot, without ever stopping
// serve. The returned func stops it and waits for it.
func (o *serveOptions) startSecure(ctx context.Context, handler http.Handler, status *secureStatus, logger klog.Logger) func() {
	if status == nil {
		return func() {}
	}
	hostname, err := os.Hostname()
	if err != nil {
		logger.Error(err, "Failed to read the host name for the serving certificate: it names localhost and the bind address only")
		hostname = "localhost"
	}
	ctx, cancel := context.WithCancel(ctx)
	done := o.secure.Run(ctx, hostname, handler, clock.RealClock{}, logger, status.report)
	return func() { cancel(); <-done }
}
