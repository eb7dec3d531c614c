package credentialprovider

import (
	"slices"
	"sync"
	"time"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// keyKind is the cacheKeyType a cache entry was stored under.
type keyKind uint8

const (
	keyUnknown keyKind = iota // no response seen yet
	keyImage
	keyRegistry
	keyGlobal
)

// cacheKey identifies one cache entry of one provider. value is the
// image's repository name (keyImage), its registry host[:port]
// (keyRegistry) or empty (keyGlobal); sa is the service-account key in
// service-account-token mode (with the token's digest for cacheType
// Token), empty otherwise. It is a comparable struct so a look-up builds
// no string.
type cacheKey struct {
	kind  keyKind
	value string
	sa    string
}

func keyFor(kind keyKind, im keyring.Image, imageName, sa string) cacheKey {
	switch kind {
	case keyRegistry:
		return cacheKey{kind: keyRegistry, value: im.Registry, sa: sa}
	case keyGlobal:
		return cacheKey{kind: keyGlobal, sa: sa}
	default:
		return cacheKey{kind: keyImage, value: imageName, sa: sa}
	}
}

// authEntry is one credential of a response, its pattern compiled.
type authEntry struct {
	pattern keyring.Pattern
	key     string
	auth    credential.AuthConfig
}

// memoLimit bounds how many images' results one entry remembers.
const memoLimit = 64

// cacheEntry is one plugin response, as cached (or, with a zero duration,
// only shared between the look-ups of one run).
type cacheEntry struct {
	kind      keyKind
	expiresAt time.Time // zero: not cached
	auths     []authEntry
	source    credential.Source

	mu   sync.RWMutex
	memo map[string][]credential.Credential // by image reference as given
}

// newEntry sorts the response's credentials most specific first (ties by
// key, for a stable order). Invalid keys were rejected by DecodeResponse.
func newEntry(r *Response, kind keyKind, source credential.Source) *cacheEntry {
	e := &cacheEntry{kind: kind, source: source, auths: make([]authEntry, 0, len(r.Auth))}
	for k, a := range r.Auth {
		pat, err := compilePattern(k)
		if err != nil {
			continue
		}
		e.auths = append(e.auths, authEntry{
			pattern: pat,
			key:     k,
			auth:    credential.AuthConfig{Username: a.Username, Password: a.Password},
		})
	}
	slices.SortFunc(e.auths, func(a, b authEntry) int {
		switch {
		case a.pattern.MoreSpecific(b.pattern):
			return -1
		case b.pattern.MoreSpecific(a.pattern):
			return 1
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	return e
}

// credentialsFor returns the entry's credentials whose pattern matches the
// image, most specific first, each with its source and keyed hash for the
// image's registry. Identical credentials are returned once. The result is
// a fresh slice the caller may keep.
func (e *cacheEntry) credentialsFor(image string, im keyring.Image, h *credential.Hasher) []credential.Credential {
	e.mu.RLock()
	got, ok := e.memo[image]
	e.mu.RUnlock()
	if !ok {
		got = e.match(im, h)
		e.mu.Lock()
		if e.memo == nil {
			e.memo = make(map[string][]credential.Credential)
		}
		if len(e.memo) < memoLimit {
			e.memo[image] = got
		}
		e.mu.Unlock()
	}
	if len(got) == 0 {
		return nil
	}
	return slices.Clone(got)
}

func (e *cacheEntry) match(im keyring.Image, h *credential.Hasher) []credential.Credential {
	var out []credential.Credential
	for i := range e.auths {
		a := &e.auths[i]
		if !a.pattern.Match(im) {
			continue
		}
		hash := h.Hash(im.Registry, a.auth)
		if slices.ContainsFunc(out, func(c credential.Credential) bool { return c.Hash == hash }) {
			continue
		}
		out = append(out, credential.Credential{Registry: im.Registry, Auth: a.auth, Source: e.source, Hash: hash})
	}
	return out
}

// failure is a remembered plugin failure (negative cache).
type failure struct {
	err       error
	expiresAt time.Time
}

// cache holds one provider's entries and recent failures.
type cache struct {
	mu       sync.RWMutex
	entries  map[cacheKey]*cacheEntry
	failures map[string]failure // by flight key
}

func newCache() *cache {
	return &cache{entries: map[cacheKey]*cacheEntry{}, failures: map[string]failure{}}
}

// get returns the live entry for the image, trying the Image, Registry and
// Global keys in turn (a plugin may change its cacheKeyType between
// responses). An entry is never served at or after its expiry, whether or
// not the janitor has removed it yet.
func (c *cache) get(im keyring.Image, imageName, sa string, now time.Time) *cacheEntry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.entries) == 0 {
		return nil
	}
	for _, k := range [...]keyKind{keyImage, keyRegistry, keyGlobal} {
		if e, ok := c.entries[keyFor(k, im, imageName, sa)]; ok && now.Before(e.expiresAt) {
			return e
		}
	}
	return nil
}

func (c *cache) put(k cacheKey, e *cacheEntry) {
	c.mu.Lock()
	c.entries[k] = e
	c.mu.Unlock()
}

// failed returns the remembered failure for a flight key, if still live.
func (c *cache) failed(flightKey string, now time.Time) (failure, bool) {
	c.mu.RLock()
	f, ok := c.failures[flightKey]
	c.mu.RUnlock()
	if ok && now.Before(f.expiresAt) {
		return f, true
	}
	return failure{}, false
}

func (c *cache) fail(flightKey string, f failure) {
	c.mu.Lock()
	c.failures[flightKey] = f
	c.mu.Unlock()
}

func (c *cache) forget(flightKey string) {
	c.mu.Lock()
	delete(c.failures, flightKey)
	c.mu.Unlock()
}

// sweep removes every entry and failure that has expired at now and
// returns how many it removed.
func (c *cache) sweep(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, e := range c.entries {
		if !now.Before(e.expiresAt) {
			delete(c.entries, k)
			n++
		}
	}
	for k, f := range c.failures {
		if !now.Before(f.expiresAt) {
			delete(c.failures, k)
			n++
		}
	}
	return n
}

// size returns the number of entries and failures held (for tests).
func (c *cache) size() (entries, failures int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries), len(c.failures)
}
