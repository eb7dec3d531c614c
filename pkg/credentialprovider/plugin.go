package credentialprovider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"

	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// plugin is one configured provider at run time.
type plugin struct {
	m          *Manager
	cfg        Provider
	path       string
	patterns   []keyring.Pattern
	encoder    requestEncoder
	timeout    time.Duration
	env        []string // configured env, "NAME=value"
	nodeSource credential.Source

	cache *cache

	group    singleflight.Group
	flightMu sync.Mutex
	flights  map[string]*flight

	// lastKind is the keyKind of the last response, used to choose the
	// flight key before the next response says which key it wants.
	lastKind atomic.Uint32
}

// matches reports whether any matchImages pattern matches the image.
func (p *plugin) matches(im keyring.Image) bool {
	for i := range p.patterns {
		if p.patterns[i].Match(im) {
			return true
		}
	}
	return false
}

// lookup returns the provider's answer for an image that matched its
// matchImages, from the cache or by running the plugin: nil when the
// provider is skipped for the pod.
func (p *plugin) lookup(ctx context.Context, pod PodInfo, im keyring.Image, name string) (*keyring.Static, error) {
	sc := saContext{source: p.nodeSource}
	if p.cfg.TokenAttributes != nil {
		var err error
		if sc, err = p.serviceAccountFor(ctx, pod); err != nil {
			return nil, err
		}
		if sc.skip {
			p.m.logger.V(5).Info("Skipping credential provider: pod has no service account", "provider", p.cfg.Name, "pod", pod.Namespace+"/"+pod.Name)
			return nil, nil
		}
	}
	now := p.m.clock.Now()
	if e := p.cache.get(im, name, sc.key, now); e != nil {
		cacheHits.WithLabelValues(p.cfg.Name).Inc()
		return e.keys, nil
	}
	cacheMisses.WithLabelValues(p.cfg.Name).Inc()

	res, err := p.runFor(ctx, keyKind(p.lastKind.Load()), im, name, sc, now)
	if err == nil && !res.covers(name, im.Registry) {
		// Coalesced under a registry or global key, but the answer is for
		// another image only: ask for this one.
		res, err = p.runFor(ctx, keyImage, im, name, sc, now)
	}
	if err != nil {
		return nil, err
	}
	return res.entry.keys, nil
}

// flightKeyFor is the singleflight (and negative-cache) key: the cache key
// the next response is expected to use. Before any response, look-ups are
// coalesced per registry (see DESIGN in manager.go).
func flightKeyFor(kind keyKind, im keyring.Image, name, sa string) string {
	var b strings.Builder
	switch kind {
	case keyGlobal:
		b.WriteString("g\x00")
	case keyImage:
		b.WriteString("i\x00")
		b.WriteString(name)
	default: // keyRegistry, keyUnknown
		b.WriteString("r\x00")
		b.WriteString(im.Registry)
	}
	b.WriteByte(0)
	b.WriteString(sa)
	return b.String()
}

// runFor runs the plugin for the image under the flight key of kind,
// unless that key failed within the negative-cache TTL.
func (p *plugin) runFor(ctx context.Context, kind keyKind, im keyring.Image, name string, sc saContext, now time.Time) (*flightResult, error) {
	key := flightKeyFor(kind, im, name, sc.key)
	if f, ok := p.cache.failed(key, now); ok {
		return nil, fmt.Errorf("%w (not retried for %v): %w", ErrRecentFailure, f.expiresAt.Sub(now).Round(time.Millisecond), f.err)
	}
	return p.do(ctx, key, func(ctx context.Context) (*flightResult, error) {
		res, err := p.exchange(ctx, im, name, sc)
		if err != nil {
			if p.m.negativeTTL > 0 && !errors.Is(err, ErrPluginCanceled) && !errors.Is(err, ErrServiceAccount) {
				p.cache.fail(key, failure{err: err, expiresAt: p.m.clock.Now().Add(p.m.negativeTTL)})
			}
			return nil, err
		}
		p.cache.forget(key)
		return res, nil
	})
}

// exchange runs the plugin once and caches its answer.
func (p *plugin) exchange(ctx context.Context, im keyring.Image, name string, sc saContext) (*flightResult, error) {
	token := sc.token
	if sc.withToken && token == "" {
		var err error
		if token, err = p.mintToken(ctx, sc.tokenReq); err != nil {
			return nil, err
		}
	}
	resp, err := p.exec(ctx, name, token, sc.annotations)
	if err != nil {
		return nil, err
	}
	if err := checkNotToken(p.cfg.Name, resp, token); err != nil {
		return nil, err
	}
	kind := kindOf(resp.CacheKeyType)
	p.lastKind.Store(uint32(kind))
	entry := newEntry(resp, kind, sc.source, p.m.hasher)
	ttl := p.cfg.DefaultCacheDuration
	if resp.CacheDuration != nil {
		ttl = *resp.CacheDuration
	}
	if ttl > 0 {
		entry.expiresAt = p.m.clock.Now().Add(ttl)
		p.cache.put(keyFor(kind, im, name, sc.key), entry)
	}
	return &flightResult{entry: entry, image: name, registry: im.Registry}, nil
}

func kindOf(t credentialproviderapi.PluginCacheKeyType) keyKind {
	switch t {
	case credentialproviderapi.RegistryPluginCacheKeyType:
		return keyRegistry
	case credentialproviderapi.GlobalPluginCacheKeyType:
		return keyGlobal
	default:
		return keyImage
	}
}

// exec runs the plugin for image and checks its response. It records the
// duration and error metrics and logs stderr (capped), never stdout.
func (p *plugin) exec(ctx context.Context, image, token string, annotations map[string]string) (*Response, error) {
	logger := p.m.logger.WithValues("provider", p.cfg.Name, "image", image)
	fail := func(kind ErrorKind, exitCode int, detail string, err error) error {
		pluginErrors.WithLabelValues(p.cfg.Name, string(kind)).Inc()
		return &PluginError{Plugin: p.cfg.Name, Image: image, Kind: kind, ExitCode: exitCode, Detail: detail, Err: err}
	}
	stdin, err := p.encoder.encode(image, token, annotations)
	if err != nil {
		return nil, fail(KindEncodeRequest, 0, "cannot encode the request", err)
	}
	ctx, cancel := withTimeout(ctx, p.m.timeouts, p.timeout)
	defer cancel()

	start := time.Now()
	res, rf := run(ctx, runSpec{
		path:      p.path,
		args:      p.cfg.Args,
		env:       pluginEnv(p.m.environ(), p.env),
		stdin:     stdin,
		stdoutMax: p.m.stdoutMax,
		stderrMax: p.m.stderrMax,
	})
	pluginDuration.WithLabelValues(p.cfg.Name).Observe(time.Since(start).Seconds())
	var resp *Response
	if rf == nil {
		resp, err = DecodeResponse(p.cfg.APIVersion, res.stdout)
	}
	if len(res.stderr) > 0 {
		// Scrubbed of every secret the plugin was given or gave, in every
		// form, before it is cut to length (a cut could split one).
		stderr := leak.Redact(string(res.stderr), p.secrets(token, resp)...)
		logger.V(4).Info("Credential provider plugin wrote to stderr", "stderr", capString([]byte(stderr), stderrLogLimit))
	}
	if rf != nil {
		if rf.kind == KindTimeout {
			rf.detail = fmt.Sprintf("did not finish within %v and was killed", p.timeout)
		}
		return nil, fail(rf.kind, res.exitCode, rf.detail, p.scrubbed(rf.err, token))
	}
	if err != nil {
		return nil, fail(KindInvalidResponse, 0, "invalid response", err)
	}
	logger.V(5).Info("Credential provider plugin answered", "cacheKeyType", resp.CacheKeyType, "credentials", len(resp.Auth))
	return resp, nil
}

// secrets are what a run's stderr must not show: the service account
// token, the values of the provider's env, and the credentials answered.
func (p *plugin) secrets(token string, resp *Response) []string {
	out := []string{token}
	for _, kv := range p.env {
		if _, v, ok := strings.Cut(kv, "="); ok {
			out = append(out, v)
		}
	}
	if resp != nil {
		for _, a := range resp.Auth {
			out = append(out, a.Password)
		}
	}
	return out
}

// scrubbed returns err with every secret the plugin was given removed
// from its text. A start failure's text is read from the run's stderr,
// which the plugin writes too: a plugin that exits with the reaper's
// start-failure status and prefix would otherwise put what it was given
// (the service account token, the provider's env) into the error. An
// error that holds none keeps its identity.
func (p *plugin) scrubbed(err error, token string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if clean := leak.Redact(msg, p.secrets(token, nil)...); clean != msg {
		return errors.New(clean)
	}
	return err
}

func capString(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + fmt.Sprintf("... (%d more bytes)", len(b)-n)
}

// pluginEnv is the plugin's environment: the inherited one, then the
// configured variables. It is never nil, as exec.Cmd would give a nil
// environment the whole process environment: WithEnviron returning none
// means none.
func pluginEnv(inherited, configured []string) []string {
	env := make([]string, 0, len(inherited)+len(configured))
	env = append(env, inherited...)
	return append(env, configured...)
}
