package registry

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
)

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("registry closed")

// Registry is an embedded OCI registry with access control and request
// accounting. Its methods are safe for concurrent use.
type Registry struct {
	opts          options
	access        *accessTable
	users         *userStore
	adminPassword string // random, made by New; used only by Push and Copy
	inner         http.Handler
	requests      requestLog
	log           accessLogger
	down          atomic.Bool

	mu      sync.Mutex // guards the fields below
	addr    string
	srv     *http.Server
	served  chan struct{} // closed when srv.Serve returns
	running bool
	closed  bool
}

var _ http.Handler = (*Registry)(nil)

// New validates cfg, starts a registry listening on 127.0.0.1 (a random
// port unless WithAddr names one) and returns it. The caller should call
// Close.
func New(cfg Config, opts ...Option) (*Registry, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("invalid registry option: %w", err)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	users, err := newUserStore(cfg.Users, o.bcryptCost)
	if err != nil {
		return nil, err
	}
	r := &Registry{
		opts:          o,
		access:        compileAccess(&cfg),
		users:         users,
		adminPassword: rand.Text(),
		requests:      requestLog{limit: o.logSize},
		log:           accessLogger{logger: o.logger, w: o.accessLog},
		addr:          o.addr,
	}
	if err := users.addRandom(AdminUser, r.adminPassword); err != nil {
		return nil, err
	}
	r.inner = ggcr.New(
		ggcr.Logger(log.New(io.Discard, "", 0)), // the middleware logs instead
		ggcr.WithBlobHandler(newLinkedBlobs()),
	)
	if err := r.Start(); err != nil {
		return nil, err
	}
	return r, nil
}

// Addr returns the address the registry listens on, "127.0.0.1:PORT".
// It stays the same across Stop and Start.
func (r *Registry) Addr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// Host returns the registry host as image references name it; it is the
// same string as Addr.
func (r *Registry) Host() string { return r.Addr() }

// URL returns the registry's base URL, "http://127.0.0.1:PORT".
func (r *Registry) URL() string { return "http://" + r.Addr() }

// Ref returns the image reference of repo at ref: "HOST/repo@ref" when ref
// is a digest ("sha256:..."), "HOST/repo:ref" otherwise.
func (r *Registry) Ref(repo, ref string) string {
	if strings.Contains(ref, ":") {
		return r.Host() + "/" + repo + "@" + ref
	}
	return r.Host() + "/" + repo + ":" + ref
}

// Start listens again, on the same address, after Stop; the content is
// unchanged. It does nothing while the registry runs and fails after
// Close, or when another process took the port meanwhile.
func (r *Registry) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return ErrClosed
	case r.running:
		return nil
	}
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", r.addr, err)
	}
	r.addr = ln.Addr().String()
	r.srv = &http.Server{
		Handler:           r,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	r.served = make(chan struct{})
	r.running = true
	go func(srv *http.Server, done chan<- struct{}) {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.opts.logger.Error(err, "Registry server stopped", "addr", ln.Addr().String())
		}
	}(r.srv, r.served)
	return nil
}

// Stop closes the listener and every open connection, so that clients see
// the registry as unreachable (connection refused), and waits for the
// server to finish. The content, users and request log stay; Start serves
// them again on the same address. Stop on a stopped registry does nothing.
func (r *Registry) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopLocked()
}

func (r *Registry) stopLocked() error {
	if !r.running {
		return nil
	}
	r.running = false
	err := r.srv.Close()
	<-r.served
	if err != nil {
		return fmt.Errorf("failed to stop the registry on %s: %w", r.addr, err)
	}
	return nil
}

// Close stops the registry for good.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return r.stopLocked()
}

// SetDown makes the registry answer every request with 503 UNAVAILABLE
// (true) or serve normally again (false), while it keeps listening. The
// 503 answers are recorded like any other.
func (r *Registry) SetDown(down bool) { r.down.Store(down) }

// Requests returns the recorded requests in the order they completed.
func (r *Registry) Requests() []Request { return r.requests.snapshot() }

// Count returns how many recorded requests f matches.
func (r *Registry) Count(f Filter) int { return r.requests.count(f) }

// Reset forgets every recorded request.
func (r *Registry) Reset() { r.requests.reset() }

// Dropped returns how many requests were dropped from the log since the
// last Reset because it was full.
func (r *Registry) Dropped() int { return r.requests.droppedCount() }
