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

// entry is one credential filed under one key.
type entry struct {
	key    string // ConfigKey of the entry as written
	auth   credential.AuthConfig
	source credential.Source
	// hashes caches the credential's hash per registry it was presented
	// to: one registry for a key without glob syntax, a few for a glob.
	// It is copied on write, so readers never lock.
	hashes atomic.Pointer[[]registryHash]
}

type registryHash struct {
	registry string
	hash     credential.Hash
}

// maxCachedHashes bounds the per-entry hash cache; a glob key matching
// more registries than this hashes the rest on each look-up.
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

// group is the credentials filed under one key, in the order they were
// added.
type group struct {
	key     string
	pattern Pattern // key read as URLsMatchStr reads it; zero (no match) if it does not parse
	entries []*entry
}

// index is the kubelet's BasicDockerKeyring: entries grouped by key, the
// keys in reverse lexical order, and the entries of the key
// "index.docker.io" for Docker Hub images that no key matched.
type index struct {
	hasher *credential.Hasher
	groups []group
	hub    []*entry
}

// newIndex files entries (given in the order the kubelet would add them)
// under their keys. h must not be nil.
func newIndex(h *credential.Hasher, entries []*entry) index {
	if h == nil {
		panic("keyring: nil credential.Hasher")
	}
	x := index{hasher: h}
	at := make(map[string]int, len(entries))
	for _, e := range entries {
		i, ok := at[e.key]
		if !ok {
			i = len(x.groups)
			at[e.key] = i
			p, _ := ParsePattern(e.key) // as Lookup's URLsMatchStr: a key that does not parse matches nothing
			x.groups = append(x.groups, group{key: e.key, pattern: p})
		}
		x.groups[i].entries = append(x.groups[i].entries, e)
	}
	sort.Slice(x.groups, func(i, j int) bool { return x.groups[i].key > x.groups[j].key })
	for i := range x.groups {
		if x.groups[i].key == legacyDockerHub {
			x.hub = x.groups[i].entries
		}
	}
	return x
}

// matches appends to hits the entries whose key matches im, in the
// kubelet's order: keys in reverse lexical order, the entries of one key
// in the order they were added.
func (x *index) matches(hits []hit, im Image) []hit {
	for i := range x.groups {
		g := &x.groups[i]
		if !g.pattern.Match(im) {
			continue
		}
		for _, e := range g.entries {
			hits = append(hits, hit{entry: e, hasher: x.hasher})
		}
	}
	return hits
}

// lookup appends what the kubelet's BasicDockerKeyring.Lookup gives for
// im: the matching entries or, when none matched and im is a Docker Hub
// image, the entries of the key "index.docker.io".
func (x *index) lookup(hits []hit, im Image) []hit {
	n := len(hits)
	hits = x.matches(hits, im)
	if len(hits) == n && im.hub {
		hits = x.appendHub(hits)
	}
	return hits
}

func (x *index) appendHub(hits []hit) []hit {
	for _, e := range x.hub {
		hits = append(hits, hit{entry: e, hasher: x.hasher})
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

// buildCandidates turns hits into candidates for im with one allocation.
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
			out = append(out, hits[i].other...)
			continue
		}
		out = append(out, credential.Credential{
			Registry: im.Registry,
			Auth:     e.auth,
			Source:   e.source,
			Hash:     e.hash(hits[i].hasher, im.Registry),
		})
	}
	return out
}

// Static is a keyring of fixed credentials filed by key, as the kubelet's
// BasicDockerKeyring files what it is given: pod secrets, a node docker
// config, a credential provider plugin's answer. It is immutable and safe
// for concurrent use.
type Static struct {
	index
}

var _ Keyring = (*Static)(nil)

// Lookup implements Keyring with the kubelet's BasicDockerKeyring.Lookup:
// the credentials of every key that matches the image (Pattern), keys in
// reverse lexical order, the credentials of one key in the order they
// were added; when no key matched a Docker Hub image (Image.DockerHub),
// the credentials of the key "index.docker.io". Each candidate is hashed
// for the image's registry (Image.Registry).
func (s *Static) Lookup(_ context.Context, image string) ([]credential.Credential, error) {
	im, err := ParseImage(image)
	if err != nil {
		return nil, err
	}
	var stack [hitsOnStack]hit
	return buildCandidates(s.lookup(stack[:0], im), im), nil
}

// LookupAll returns what one BasicDockerKeyring given the credentials of
// every keyring of ss, in argument order, gives for im: the kubelet puts
// the answers of all its credential provider plugins into one such
// keyring before it looks an image up. Keys are ordered across ss; the
// credentials of one key come in argument order; the Docker Hub fallback
// applies when no key of any of them matched. Nil keyrings are ignored.
func LookupAll(im Image, ss ...*Static) []credential.Credential {
	var stack [hitsOnStack]hit
	hits := stack[:0]
	from := 0 // how many of ss matched
	for _, s := range ss {
		if s == nil {
			continue
		}
		n := len(hits)
		if hits = s.matches(hits, im); len(hits) > n {
			from++
		}
	}
	if from > 1 {
		slices.SortStableFunc(hits, func(a, b hit) int { return strings.Compare(b.entry.key, a.entry.key) })
	}
	if len(hits) == 0 && im.hub {
		for _, s := range ss {
			if s != nil {
				hits = s.appendHub(hits)
			}
		}
	}
	return buildCandidates(hits, im)
}

// NewStatic returns a keyring of fixed credentials, all from one source,
// filed as the kubelet files a credential provider's answer: each map key
// through ConfigKey, the keys taken in lexical order (the kubelet's order
// of a map, which is random, has no better choice). Entries with an empty
// AuthConfig are kept, as the kubelet keeps them: they match, and are
// tried as an anonymous pull.
//
// A key that ConfigKey rejects is skipped, as the kubelet skips it, and
// reported in the returned error (a *PatternError per key, joined); the
// returned keyring is never nil and holds every other entry. h must not be
// nil.
func NewStatic(h *credential.Hasher, src credential.Source, auths map[string]credential.AuthConfig) (*Static, error) {
	keys := make([]string, 0, len(auths))
	for k := range auths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := make([]*entry, 0, len(keys))
	var errs []error
	for _, raw := range keys {
		key, err := ConfigKey(raw)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		entries = append(entries, &entry{key: key, auth: auths[raw], source: src})
	}
	return &Static{newIndex(h, entries)}, errors.Join(errs...)
}
