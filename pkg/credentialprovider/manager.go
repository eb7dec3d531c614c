package credentialprovider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// DESIGN: caching and coalescing.
//
// Each provider has one cache, keyed by (cacheKeyType, value, service
// account): the image's repository name for Image, its registry host[:port]
// for Registry, nothing for Global. A look-up tries the Image, Registry and
// Global keys of its image in turn, because a plugin may change its
// cacheKeyType from one response to the next; an entry is never served at
// or after its expiry, and the janitor removes expired ones on its own
// ticker, so an idle cache does not keep credentials.
//
// A miss runs the plugin through golang.org/x/sync/singleflight, keyed by
// the cache key the response is expected to use, so that look-ups that
// would share a cache entry share the run. The key type of a response is
// only known once it arrives, so the flight key is chosen from the last
// response of the provider: per image after an Image response, per
// registry after a Registry response, one key after a Global one. Before
// the first response, look-ups are coalesced per registry: N images of
// one registry make one run. That is safe because every caller checks that
// the answer covers its own image (same repository, or a Registry answer
// for its registry, or a Global answer) and, when it does not (the plugin
// answered per image for another image), runs the plugin for its own
// image. The cost of guessing wrong is one extra run latency for the
// callers coalesced with the first run, once per provider; the gain is
// that a Registry- or Global-keyed plugin is run once, not once per image,
// when a node starts many pods at the same time. The same check makes a
// change of cacheKeyType between responses safe.
//
// A run is shared by several callers, so it does not die with the first
// caller's context: it is canceled when the last caller waiting for it has
// given up, when the Manager is closed, or at the provider's timeout.
//
// A failed run is remembered under its flight key for the negative-cache
// TTL, so that a broken plugin is not run again for every container of
// every pod; look-ups in that window fail at once with ErrRecentFailure
// wrapping the original error. Cancellations are not remembered.
//
// In service-account-token mode the service account key (namespace, name,
// UID and the annotation values passed to the plugin) is part of every
// cache and flight key; with cacheType Token the token's SHA-256 is part
// of it too, so credentials minted for one token are never served for
// another.

// Manager runs the configured credential provider plugins for the pods of
// a node. It is safe for concurrent use; Close stops it.
type Manager struct {
	plugins     []*plugin
	hasher      *credential.Hasher
	clock       clock.WithTicker
	timeouts    clock.Clock
	tokens      ServiceAccountTokenSource
	logger      klog.Logger
	environ     func() []string
	stdoutMax   int
	stderrMax   int
	negativeTTL time.Duration

	images     sync.Map // image reference -> *parsedImage
	imageCount atomic.Int32

	ctx       context.Context
	cancel    context.CancelCauseFunc
	closeOnce sync.Once
	done      chan struct{}
}

// errManagerClosed is the cancellation cause of runs stopped by Close.
var errManagerClosed = errors.New("credential provider manager closed")

// NewManager validates cfg with the gates of the options, resolves each
// provider's executable as binDir/<name> (it must be an executable
// regular file), and starts the cache janitor. hasher computes every
// returned credential's Hash. The caller must call Close.
func NewManager(cfg *Config, binDir string, hasher *credential.Hasher, opts ...Option) (*Manager, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("invalid credential provider option: %w", err)
		}
	}
	if hasher == nil {
		return nil, errors.New("credential provider manager needs a hasher")
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: no configuration", ErrInvalidConfig)
	}
	if err := cfg.Validate(o.gates); err != nil {
		return nil, err
	}
	if err := cfg.CheckBinaries(binDir); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, pc := range cfg.Providers {
		names[pc.Name] = true
		if pc.TokenAttributes != nil && o.tokens == nil {
			return nil, fmt.Errorf("%w: provider %q has tokenAttributes but no service account token source was given", ErrInvalidConfig, pc.Name)
		}
	}
	for name := range o.providerTimeouts {
		if !names[name] {
			return nil, fmt.Errorf("invalid credential provider option: timeout for unknown provider %q", name)
		}
	}

	m := &Manager{
		hasher:      hasher,
		clock:       o.clock,
		timeouts:    o.timeoutClock,
		tokens:      o.tokens,
		logger:      o.logger,
		environ:     o.environ,
		stdoutMax:   o.stdoutMax,
		stderrMax:   o.stderrMax,
		negativeTTL: o.negativeTTL,
		done:        make(chan struct{}),
	}
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	for _, pc := range cfg.Providers {
		p, err := m.newPlugin(pc, binDir, o)
		if err != nil {
			m.cancel(errManagerClosed)
			return nil, err
		}
		m.plugins = append(m.plugins, p)
	}
	// The ticker is made before NewManager returns, so a test's fake clock
	// has its waiter as soon as the Manager exists.
	ticker := m.clock.NewTicker(o.janitorInterval)
	go m.janitor(ticker, o.sweepHook)
	return m, nil
}

// CheckBinaries checks that binDir is a directory holding every
// provider's executable (binDir/<name>, an executable regular file), as
// NewManager does; a caller that must not change any state on bad input
// calls it first.
func (c *Config) CheckBinaries(binDir string) error {
	if err := checkDir(binDir); err != nil {
		return err
	}
	for _, pc := range c.Providers {
		if _, err := executable(pc, binDir); err != nil {
			return err
		}
	}
	return nil
}

func checkDir(binDir string) error {
	if binDir == "" {
		return fmt.Errorf("%w: no credential provider bin directory given", ErrInvalidConfig)
	}
	fi, err := os.Stat(binDir)
	if err != nil {
		return fmt.Errorf("%w: credential provider bin directory: %w", ErrInvalidConfig, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: credential provider bin directory %q is not a directory", ErrInvalidConfig, binDir)
	}
	return nil
}

// executable returns the path of pc's plugin, checked.
func executable(pc Provider, binDir string) (string, error) {
	path := filepath.Join(binDir, pc.Name)
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: provider %q: plugin executable: %w", ErrInvalidConfig, pc.Name, err)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%w: provider %q: plugin %q is not a regular file", ErrInvalidConfig, pc.Name, path)
	case fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%w: provider %q: plugin %q is not executable", ErrInvalidConfig, pc.Name, path)
	}
	return path, nil
}

func (m *Manager) newPlugin(pc Provider, binDir string, o options) (*plugin, error) {
	path, err := executable(pc, binDir)
	if err != nil {
		return nil, err
	}
	enc, err := newRequestEncoder(pc.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("%w: provider %q: %w", ErrInvalidConfig, pc.Name, err)
	}
	p := &plugin{
		m:          m,
		cfg:        pc,
		path:       path,
		encoder:    enc,
		timeout:    o.timeout,
		nodeSource: credential.Source{Kind: credential.SourceNode, Name: pc.Name},
		cache:      newCache(),
		flights:    map[string]*flight{},
	}
	if d, ok := o.providerTimeouts[pc.Name]; ok {
		p.timeout = d
	}
	for _, s := range pc.MatchImages {
		pat, err := compilePattern(s)
		if err != nil { // unreachable after Validate
			return nil, fmt.Errorf("%w: provider %q: matchImages %q: %w", ErrInvalidConfig, pc.Name, s, err)
		}
		p.patterns = append(p.patterns, pat)
	}
	for _, e := range pc.Env {
		p.env = append(p.env, e.Name+"="+e.Value)
	}
	return p, nil
}

// janitor removes expired cache entries and failures on every tick.
func (m *Manager) janitor(t clock.Ticker, hook func(int)) {
	defer close(m.done)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C():
			now := m.clock.Now()
			removed := 0
			for _, p := range m.plugins {
				removed += p.cache.sweep(now)
			}
			if removed > 0 {
				m.logger.V(5).Info("Removed expired credential provider cache entries", "count", removed)
			}
			if hook != nil {
				hook(removed)
			}
		}
	}
}

// Close stops the janitor and kills plugins still running. Look-ups after
// Close fail. Close is idempotent.
func (m *Manager) Close() {
	m.closeOnce.Do(func() {
		m.cancel(errManagerClosed)
		<-m.done
	})
}

// ForPod returns the keyring of the pod's image pulls: its Lookup runs, in
// configuration order, every provider whose matchImages match the image
// (keyring.Pattern) for the image's normalized name (keyring.Image.Name,
// what the kubelet asks plugins about), and returns what the kubelet's
// keyring of all their answers gives (keyring.LookupAll: keys in reverse
// lexical order across the answers, one key's credentials in
// configuration order, the Docker Hub fallback over all of them). A
// provider that fails adds its error (joined with the
// others') while the other providers' credentials are still returned, as
// the keyring.Keyring contract asks.
func (m *Manager) ForPod(pod PodInfo) keyring.Keyring {
	return &podKeyring{m: m, pod: pod}
}

// ForNode returns the keyring of the node's own plugin credentials: as
// ForPod, with only the providers without tokenAttributes. Their
// credentials are the node's (credential.SourceNode, the provider's name):
// the kubelet gives them to every pod. Service-account-token providers are
// never run, as their credentials belong to one pod's service account.
func (m *Manager) ForNode() keyring.Keyring {
	return &podKeyring{m: m, nodeOnly: true}
}

type podKeyring struct {
	m        *Manager
	pod      PodInfo
	nodeOnly bool
}

var _ keyring.Keyring = (*podKeyring)(nil)

// Lookup implements keyring.Keyring.
func (k *podKeyring) Lookup(ctx context.Context, image string) ([]credential.Credential, error) {
	m := k.m
	if err := m.ctx.Err(); err != nil {
		return nil, errManagerClosed
	}
	if len(m.plugins) == 0 {
		return nil, nil
	}
	pi, err := m.parseImage(image)
	if err != nil {
		return nil, err
	}
	im := pi.im
	var (
		stack [4]*keyring.Static
		errs  []error
	)
	answers := stack[:0]
	for _, p := range m.plugins {
		if !p.matches(im) || (k.nodeOnly && p.cfg.TokenAttributes != nil) {
			continue
		}
		keys, err := p.lookup(ctx, k.pod, im, pi.name)
		if err != nil {
			errs = append(errs, err)
		}
		if keys != nil {
			answers = append(answers, keys)
		}
	}
	// As the kubelet's external credential provider keyring: every
	// answer added to one BasicDockerKeyring, in configuration order,
	// then looked up once.
	return keyring.LookupAll(im, answers...), errors.Join(errs...)
}

// imageMemoLimit bounds the parsed-image memo.
const imageMemoLimit = 4096

// parsedImage is an image reference parsed once: the image and its
// repository name ("registry.example/team/app"), the Image cache key and
// the image the plugin is asked about.
type parsedImage struct {
	im   keyring.Image
	name string
}

// parseImage parses an image reference once and remembers the result
// (a node pulls a bounded set of images over and over).
func (m *Manager) parseImage(image string) (*parsedImage, error) {
	if v, ok := m.images.Load(image); ok {
		return v.(*parsedImage), nil
	}
	im, err := keyring.ParseImage(image)
	if err != nil {
		return nil, err
	}
	pi := &parsedImage{im: im, name: im.Name()}
	if m.imageCount.Load() < imageMemoLimit {
		if _, loaded := m.images.LoadOrStore(image, pi); !loaded {
			m.imageCount.Add(1)
		}
	}
	return pi, nil
}
