package criruntime

import (
	"net/http"
	goruntime "runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// defaultConcurrentDownloads is how many blobs of one pull are fetched at
// once (containerd's CRI plugin defaults to 3 as well).
const defaultConcurrentDownloads = 3

type options struct {
	transport http.RoundTripper
	logger    klog.Logger
	clock     clock.PassiveClock
	platform  v1.Platform
	downloads int
	userAgent string
	// registryConfigPath is containerd's config_path, for VerifyManifest.
	registryConfigPath string
	// registryTimeout bounds the registry requests (WithRegistryTimeout).
	registryTimeout time.Duration
}

// Option configures an Embedded image service.
type Option func(*options)

func defaultOptions() options {
	return options{
		transport: http.DefaultTransport,
		logger:    klog.Background(),
		clock:     clock.RealClock{},
		platform:  v1.Platform{OS: "linux", Architecture: goruntime.GOARCH},
		downloads: defaultConcurrentDownloads,
		userAgent: "pullguard",

		registryTimeout: DefaultRegistryTimeout,
	}
}

// WithTransport sets the HTTP transport used to reach registries (default
// http.DefaultTransport). Tests pass their server's transport here.
func WithTransport(t http.RoundTripper) Option {
	return func(o *options) {
		if t != nil {
			o.transport = t
		}
	}
}

// WithLogger sets the logger (default klog.Background()). Image names and
// digests are logged; credentials never are.
func WithLogger(l klog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithClock sets the clock used for ImageFsInfo timestamps (default the
// real clock).
func WithClock(c clock.PassiveClock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithPlatform sets the platform chosen from multi-platform images (default
// linux and the architecture pullguard runs on). Fields left empty match
// anything, as in v1.Platform.Satisfies.
func WithPlatform(p v1.Platform) Option {
	return func(o *options) { o.platform = p }
}

// WithConcurrentDownloads sets how many blobs one pull fetches at once
// (default 3; values below 1 mean 1).
func WithConcurrentDownloads(n int) Option {
	return func(o *options) { o.downloads = max(n, 1) }
}

// WithUserAgent sets the User-Agent sent to registries (default
// "pullguard").
func WithUserAgent(ua string) Option {
	return func(o *options) { o.userAgent = ua }
}

// WithRegistryConfigPath makes VerifyManifest reach registries through
// containerd's registry hosts configuration under dir (containerd's
// config_path: <dir>/<host>/hosts.toml, or Docker's certificate files
// there; several directories separated by the OS's list separator, as
// containerd accepts), so that a verification goes where the runtime's
// pull went: its mirrors, CAs, client certificates and skip_verify. No
// path (the default), or a directory with no entry for a registry, is no
// configuration for it: the registry itself, over HTTPS (plain HTTP with
// no TLS check for a loopback host with a port other than 443, as in
// containerd). The embedded runtime does not use it.
func WithRegistryConfigPath(dir string) Option {
	return func(o *options) { o.registryConfigPath = dir }
}

// WithRegistryTimeout bounds in time every request made to a registry
// (default DefaultRegistryTimeout; values not above 0 keep it). One
// verification (VerifyManifest: every host tried, token fetches and
// redirects included) ends by then; so do the embedded runtime's requests
// for manifests and its proofs of stored blobs. Each phase of any request
// (connecting, the TLS handshake, the wait for an answer's headers) is
// bounded by it too, which also bounds the embedded runtime's blob
// downloads until their bodies flow: a body's own pace, as in containerd,
// is the runtime's pull's. A registry that does not answer in time fails
// the call with an error wrapping ErrRegistryTimeout and
// context.DeadlineExceeded, naming the host.
func WithRegistryTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.registryTimeout = d
		}
	}
}
