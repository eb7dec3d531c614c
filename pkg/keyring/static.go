package keyring

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/pullguard/pullguard/pkg/credential"
)

// entry is one credential filed under one pattern.
type entry struct {
	pattern Pattern
	auth    credential.AuthConfig
	source  credential.Source
	// hashes caches the credential's hash per registry it was presented
	// to: one registry for an exact-host pattern, a few for a wildcard.
	// It is copied on write, so readers never lock.
	hashes atomic.Pointer[[]registryHash]
}

type registryHash struct {
	registry string
	hash     credential.Hash
}

// maxCachedHashes bounds the per-entry hash cache; a wildcard pattern
// matching more registries than this hashes the rest on each look-up.
const maxCachedHashes = 16

// hash returns the keyed hash of the entry's credential presented to
// registry, from the cache when it is there.
func (e *entry) hash(h *credential.Hasher, registry string) credential.Hash {
	cached := e.hashes.Load()
	if sum, ok := cachedHash(cached, registry); ok {
		return sum
	}
	sum := h.Hash(registry, e.auth)
	for cached == nil || len(*cached) < maxCachedHashes {
		var next []registryHash
		if cached != nil {
			next = slices.Clip(*cached) // append below copies
		}
		next = append(next, registryHash{strings.Clone(registry), sum})
		if e.hashes.CompareAndSwap(cached, &next) {
			return sum
		}
		cached = e.hashes.Load()
		if _, ok := cachedHash(cached, registry); ok {
			return sum // another look-up cached it meanwhile
		}
	}
	return sum
}

func cachedHash(cached *[]registryHash, registry string) (credential.Hash, bool) {
	if cached != nil {
		for _, rh := range *cached {
			if rh.registry == registry {
				return rh.hash, true
			}
		}
	}
	return credential.Hash{}, false
}

// staticKeyring is a fixed list of entries, sorted most specific first.
type staticKeyring struct {
	hasher  *credential.Hasher
	entries []*entry
}

var _ Keyring = (*staticKeyring)(nil)

// newStaticKeyring sorts entries (given in source order) most specific
// first; the sort is stable, so source order breaks ties.
func newStaticKeyring(h *credential.Hasher, entries []*entry) *staticKeyring {
	if h == nil {
		panic("keyring: nil credential.Hasher")
	}
	sort.SliceStable(entries, func(i, j int) bool {
		return moreSpecific(&entries[i].pattern, &entries[j].pattern)
	})
	return &staticKeyring{hasher: h, entries: entries}
}

// Lookup implements Keyring.
func (k *staticKeyring) Lookup(_ context.Context, image string) ([]credential.Credential, error) {
	im, err := ParseImage(image)
	if err != nil {
		return nil, err
	}
	var stack [hitsOnStack]hit
	return buildCandidates(k.collect(stack[:0], im), im), nil
}

// collect appends the entries that match im to hits, in candidate order.
func (k *staticKeyring) collect(hits []hit, im Image) []hit {
	for _, e := range k.entries {
		if e.pattern.Match(im) {
			hits = append(hits, hit{entry: e, hasher: k.hasher})
		}
	}
	return hits
}

// hit is one step of a look-up: a matching entry, or (entry nil) the
// candidates another kind of keyring returned.
type hit struct {
	entry  *entry
	hasher *credential.Hasher
	other  []credential.Credential
}

// hitsOnStack is how many hits a look-up collects before it allocates.
const hitsOnStack = 16

// buildCandidates turns hits into candidates for im with one allocation,
// leaving out a candidate whose hash an earlier one already has.
// Candidates without a hash (from other keyrings) are always kept.
func buildCandidates(hits []hit, im Image) []credential.Credential {
	n := 0
	for i := range hits {
		if hits[i].entry != nil {
			n++
		} else {
			n += len(hits[i].other)
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]credential.Credential, 0, n)
	for i := range hits {
		e := hits[i].entry
		if e == nil {
			for _, c := range hits[i].other {
				if c.Hash.IsZero() || !containsHash(out, c.Hash) {
					out = append(out, c)
				}
			}
			continue
		}
		sum := e.hash(hits[i].hasher, im.Registry)
		if containsHash(out, sum) {
			continue
		}
		out = append(out, credential.Credential{
			Registry: im.Registry,
			Auth:     e.auth,
			Source:   e.source,
			Hash:     sum,
		})
	}
	return out
}

// containsHash reports whether a candidate with hash sum is in cs. Lists
// are short (a handful of candidates), so a scan beats a map.
func containsHash(cs []credential.Credential, sum credential.Hash) bool {
	for i := range cs {
		if cs[i].Hash == sum {
			return true
		}
	}
	return false
}

// NewStatic returns a keyring of fixed credentials, keyed by image pattern
// as a docker config is (a scheme and a leading "/v1/" or "/v2/" path are
// ignored), all from one source. It suits credential provider responses,
// whose "auth" map has this shape. Candidates are ordered as documented in
// the package; patterns that tie are in lexical order of their keys.
// Entries with an empty AuthConfig are left out.
//
// A key that is not a valid pattern is skipped and reported in the
// returned error (a *PatternError per key, joined); the returned keyring
// is never nil and holds every other entry. h must not be nil.
func NewStatic(h *credential.Hasher, src credential.Source, auths map[string]credential.AuthConfig) (Keyring, error) {
	keys := make([]string, 0, len(auths))
	for k := range auths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := make([]*entry, 0, len(keys))
	var errs []error
	for _, key := range keys {
		auth := auths[key]
		if auth.Empty() {
			continue
		}
		p, err := parsePattern(key, true)
		if err != nil {
			errs = append(errs, &PatternError{Pattern: key, Err: err})
			continue
		}
		entries = append(entries, &entry{pattern: p, auth: auth, source: src})
	}
	return newStaticKeyring(h, entries), errors.Join(errs...)
}
