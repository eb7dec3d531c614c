package credentialprovider

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/featuregates"
)

// Defaults for the options.
const (
	// DefaultTimeout is how long a plugin may run, as in the kubelet.
	DefaultTimeout = time.Minute
	// DefaultStdoutLimit bounds a plugin's response.
	DefaultStdoutLimit = 1 << 20
	// DefaultStderrLimit bounds a plugin's diagnostics.
	DefaultStderrLimit = 64 << 10
	// DefaultNegativeCacheTTL is how long a failed run is remembered.
	DefaultNegativeCacheTTL = 10 * time.Second
	// DefaultJanitorInterval is how often expired cache entries are removed.
	DefaultJanitorInterval = time.Minute
	// stderrLogLimit caps the stderr quoted in one log line.
	stderrLogLimit = 4 << 10
)

// Option configures a Manager.
type Option func(*options) error

type options struct {
	clock            clock.WithTicker
	timeoutClock     clock.Clock // measures plugin timeouts; only tests change it
	timeout          time.Duration
	providerTimeouts map[string]time.Duration
	gates            featuregates.Gates
	tokens           ServiceAccountTokenSource
	stdoutMax        int
	stderrMax        int
	negativeTTL      time.Duration
	janitorInterval  time.Duration
	logger           klog.Logger
	environ          func() []string
	sweepHook        func(removed int)
}

func defaultOptions() options {
	return options{
		clock:           clock.RealClock{},
		timeoutClock:    clock.RealClock{},
		timeout:         DefaultTimeout,
		gates:           featuregates.Defaults(),
		stdoutMax:       DefaultStdoutLimit,
		stderrMax:       DefaultStderrLimit,
		negativeTTL:     DefaultNegativeCacheTTL,
		janitorInterval: DefaultJanitorInterval,
		logger:          klog.Background(),
		environ:         os.Environ,
	}
}

// WithClock sets the clock of cache expiry, negative caching and the
// janitor (default: the real clock). Plugin timeouts always use real time.
func WithClock(c clock.WithTicker) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("nil clock")
		}
		o.clock = c
		return nil
	}
}

// WithTimeout sets how long every plugin may run before its process group
// is killed (default DefaultTimeout). WithProviderTimeout overrides it for
// one provider, whatever the order of the options.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("timeout must be positive, got %v", d)
		}
		o.timeout = d
		return nil
	}
}

// WithProviderTimeout sets the timeout of the provider called name;
// NewManager fails if no provider has that name.
func WithProviderTimeout(name string, d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("timeout of provider %q must be positive, got %v", name, d)
		}
		if o.providerTimeouts == nil {
			o.providerTimeouts = map[string]time.Duration{}
		}
		o.providerTimeouts[name] = d
		return nil
	}
}

// WithGates sets the feature gates (default featuregates.Defaults()).
// Providers with tokenAttributes need ServiceAccountTokenForCredentialProviders.
func WithGates(g featuregates.Gates) Option {
	return func(o *options) error {
		o.gates = g
		return nil
	}
}

// WithServiceAccountTokenSource supplies service accounts and tokens to
// providers with tokenAttributes; NewManager fails without it when such a
// provider is configured.
func WithServiceAccountTokenSource(s ServiceAccountTokenSource) Option {
	return func(o *options) error {
		o.tokens = s
		return nil
	}
}

// WithOutputLimits bounds what a plugin may write to stdout and to stderr
// (defaults DefaultStdoutLimit and DefaultStderrLimit). Writing more is an
// error and the plugin is killed.
func WithOutputLimits(stdout, stderr int) Option {
	return func(o *options) error {
		if stdout <= 0 || stderr <= 0 {
			return fmt.Errorf("output limits must be positive, got stdout %d, stderr %d", stdout, stderr)
		}
		o.stdoutMax, o.stderrMax = stdout, stderr
		return nil
	}
}

// WithNegativeCacheTTL sets how long a failed run is remembered, during
// which look-ups that would run the plugin for the same key fail at once
// with ErrRecentFailure (default DefaultNegativeCacheTTL; 0 disables).
func WithNegativeCacheTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("negative cache TTL must not be negative, got %v", d)
		}
		o.negativeTTL = d
		return nil
	}
}

// WithJanitorInterval sets how often expired entries are removed (default
// DefaultJanitorInterval).
func WithJanitorInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("janitor interval must be positive, got %v", d)
		}
		o.janitorInterval = d
		return nil
	}
}

// WithLogger sets the logger (default klog.Background()). Plugin stderr is
// logged at verbosity 4, capped; stdout never is.
func WithLogger(l klog.Logger) Option {
	return func(o *options) error {
		o.logger = l
		return nil
	}
}

// WithEnviron sets the environment plugins inherit before their
// configured env (default os.Environ). A function returning no variables
// gives the plugin only its configured env, never the process's.
func WithEnviron(environ func() []string) Option {
	return func(o *options) error {
		if environ == nil {
			return errors.New("nil environ")
		}
		o.environ = environ
		return nil
	}
}
