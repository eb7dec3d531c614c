package secureserving

import (
	"context"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// RetryBackoff is the wait between two attempts to bring the endpoint up:
// 1 s, doubled after each failure, 2 min at most, for as long as serve
// runs.
var RetryBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: 2 * time.Minute}

// Run brings the endpoint up in the background and serves handler on it
// until ctx is done. It binds the port and loads or generates the
// certificate (Listen), then serves (Serve). A failure of any step (the
// port held by another process, a certificate that cannot be read or
// written, a kubeconfig that cannot be read) is the endpoint's only: it
// is logged with the address, given to report, and tried again after
// RetryBackoff's wait on clk, until it succeeds or ctx is done. report(nil)
// says the endpoint serves; report is called from Run's goroutine, one
// call at a time. The returned channel is closed once the endpoint is
// down and Run tries no more.
func (o *Options) Run(ctx context.Context, hostname string, handler http.Handler, clk clock.Clock, logger klog.Logger, report func(error)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		backoff := RetryBackoff
		for {
			s, stopped, err := o.up(ctx, hostname, handler)
			if ctx.Err() != nil {
				if err == nil {
					<-stopped
				}
				return
			}
			if err == nil {
				report(nil)
				logger.Info("Serving /metrics and /healthz securely", "address", s.Addr().String(), "certificate", s.CertFile())
				<-stopped
				return
			}
			delay := backoff.Step()
			// The timer first, then the report, then the log: whoever sees
			// the log line sees the report, and a fake clock that sees the
			// report sees the timer.
			t := clk.NewTimer(delay)
			report(err)
			logger.Error(err, "The secure endpoint is down: serve goes on without it and tries again", "address", o.Address(), "retryIn", delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
	}()
	return done
}

// up is one attempt of Run's: the endpoint bound, its certificate loaded
// and serving, or an error and nothing left open.
func (o *Options) up(ctx context.Context, hostname string, handler http.Handler) (*Server, <-chan struct{}, error) {
	s, err := o.Listen(hostname)
	if err != nil {
		return nil, nil, err
	}
	stopped, err := s.serve(ctx, handler)
	if err != nil {
		_ = s.Close()
		o.Serving.Listener = nil
		return nil, nil, err
	}
	return s, stopped, nil
}

// Address is --bind-address:--secure-port, the address the endpoint
// listens on once up.
func (o *Options) Address() string {
	host := "0.0.0.0"
	if o.Serving.BindAddress != nil {
		host = o.Serving.BindAddress.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(o.Serving.BindPort))
}
