package registry

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"golang.org/x/crypto/bcrypt"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Option configures a Registry.
type Option func(*options) error

type options struct {
	addr         string
	bcryptCost   int
	deniedStatus int
	logSize      int
	accessLog    io.Writer
	logger       klog.Logger
	clock        clock.PassiveClock
}

func defaultOptions() options {
	return options{
		addr:         "127.0.0.1:0",
		bcryptCost:   bcrypt.DefaultCost,
		deniedStatus: http.StatusUnauthorized,
		logSize:      DefaultRequestLogSize,
		logger:       klog.Background(),
		clock:        clock.RealClock{},
	}
}

// WithAddr sets the listen address (default "127.0.0.1:0", a random
// port). The host must be a loopback IP address: the registry never
// listens beyond the machine.
func WithAddr(addr string) Option {
	return func(o *options) error {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("invalid listen address %q: %w", addr, err)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("listen address %q: host must be a loopback IP address", addr)
		}
		o.addr = addr
		return nil
	}
}

// WithBcryptCost sets the bcrypt cost New hashes plaintext passwords with
// (default bcrypt.DefaultCost). Tests may use bcrypt.MinCost to start
// faster; verified credentials are cached either way.
func WithBcryptCost(cost int) Option {
	return func(o *options) error {
		if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
			return fmt.Errorf("bcrypt cost %d outside [%d, %d]", cost, bcrypt.MinCost, bcrypt.MaxCost)
		}
		o.bcryptCost = cost
		return nil
	}
}

// WithDeniedStatus sets how the registry refuses valid credentials that
// lack access to a repository: http.StatusUnauthorized (the default: 401
// UNAUTHORIZED with the Basic challenge, as distribution's token auth and
// containerd's "401 Unauthorized" have it) or http.StatusForbidden (403
// DENIED without a challenge). Missing or wrong credentials always get 401.
func WithDeniedStatus(status int) Option {
	return func(o *options) error {
		if status != http.StatusUnauthorized && status != http.StatusForbidden {
			return fmt.Errorf("denied status must be 401 or 403, got %d", status)
		}
		o.deniedStatus = status
		return nil
	}
}

// WithRequestLogSize sets how many requests Requests and Count remember
// (default DefaultRequestLogSize); older ones are dropped and counted by
// Dropped. Zero turns the request log off.
func WithRequestLogSize(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("request log size must not be negative, got %d", n)
		}
		o.logSize = n
		return nil
	}
}

// WithAccessLog writes one line per request to w, in the format of
// FormatAccessLogLine. Writes are serialized; w need not be safe for
// concurrent use.
func WithAccessLog(w io.Writer) Option {
	return func(o *options) error {
		if w == nil {
			return errors.New("nil access log writer")
		}
		o.accessLog = w
		return nil
	}
}

// WithLogger sets the klog logger of the per-request lines (verbosity 2)
// and of errors (default klog.Background()).
func WithLogger(l klog.Logger) Option {
	return func(o *options) error {
		o.logger = l
		return nil
	}
}

// WithClock sets the clock that stamps and times requests (default the
// real clock).
func WithClock(c clock.PassiveClock) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("nil clock")
		}
		o.clock = c
		return nil
	}
}
