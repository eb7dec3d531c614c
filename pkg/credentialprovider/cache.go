package credentialprovider

import (
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

// cacheEntry is one plugin response, as cached (or, with a zero duration,
// only shared between the look-ups of one run): its credentials filed by
// key as the kubelet's BasicDockerKeyring files them.
type cacheEntry struct {
	kind      keyKind
	expiresAt time.Time // zero: not cached
	keys      *keyring.Static
}

// newEntry files the response's credentials (their username and password,
// all the kubelet takes of them) under their keys. A key that
// keyring.ConfigKey rejects is left out, as the kubelet's
// BasicDockerKeyring.Add leaves it out.
func newEntry(r *Response, kind keyKind, source credential.Source, h *credential.Hasher) *cacheEntry {
	auths := make(map[string]credential.AuthConfig, len(r.Auth))
	for k, a := range r.Auth {
		auths[k] = credential.AuthConfig{Username: a.Username, Password: a.Password}
	}
	keys, _ := keyring.NewStatic(h, source, auths)
	return &cacheEntry{kind: kind, keys: keys}
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
