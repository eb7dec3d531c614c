package credtracker

import (
	"maps"
	"slices"
	"time"

	"github.com/pullguard/pullguard/pkg/credential"
)

// DefaultMaxEntries bounds the secrets and the service accounts remembered
// per repository of a record; past it, the least recently verified entry
// is dropped (its holders verify once more).
const DefaultMaxEntries = 100

// ImageRecord is what the node remembers about one image ref. Values held
// by the tracker are immutable: every change makes a new ImageRecord, so
// readers never lock. Records returns deep copies.
type ImageRecord struct {
	// ImageRef is the runtime's image ID ("sha256:...").
	ImageRef string
	// Repositories maps a normalized repository name to how the image was
	// pulled under that name.
	Repositories map[string]*RepositoryRecord
	// UnknownOrigin, when set, says why the node does not know how this
	// image was pulled (an unreadable record, a recovered store): every
	// repository name not in Repositories must be verified.
	UnknownOrigin string
	// Updated is when the record last changed.
	Updated time.Time
}

// RepositoryRecord says who pulled an image under one repository name.
// A record with no entries and NodeAccessible false means the node pulled
// the image but knows no credential that did: every pod must verify.
type RepositoryRecord struct {
	// NodeAccessible is set when the image was pulled with no credentials
	// or with node-level ones: every pod may use it. It wipes the lists.
	NodeAccessible  bool
	Secrets         []SecretEntry
	ServiceAccounts []ServiceAccountEntry
	// Updated is when this repository's entry last changed; for a
	// node-accessible entry it is when that was last verified.
	Updated time.Time
}

// SecretEntry is a pull secret that pulled the image: its coordinates and
// the keyed hash of the credential it held.
type SecretEntry struct {
	Namespace, Name, UID string
	Hash                 credential.Hash
	// Verified is when a pull with this secret last succeeded.
	Verified time.Time
}

// ServiceAccountEntry is a service account whose token-bound credential
// (from a service-account-token credential provider) pulled the image.
type ServiceAccountEntry struct {
	Namespace, Name, UID string
	Verified             time.Time
}

func (e SecretEntry) sameObject(src credential.Source) bool {
	return e.Namespace == src.Namespace && e.Name == src.Name && e.UID == src.UID
}

func (e ServiceAccountEntry) sameObject(src credential.Source) bool {
	return e.Namespace == src.Namespace && e.Name == src.Name && e.UID == src.UID
}

// clone returns a deep copy of r (nil stays nil).
func (r *ImageRecord) clone() *ImageRecord {
	if r == nil {
		return nil
	}
	c := *r
	c.Repositories = make(map[string]*RepositoryRecord, len(r.Repositories))
	for name, rr := range r.Repositories {
		c.Repositories[name] = rr.clone()
	}
	return &c
}

func (rr *RepositoryRecord) clone() *RepositoryRecord {
	c := *rr
	c.Secrets = slices.Clone(rr.Secrets)
	c.ServiceAccounts = slices.Clone(rr.ServiceAccounts)
	return &c
}

// withRepository returns a copy of r (or a new record for ref) in which
// repo's entry is replaced by rr. Other repositories' entries are shared,
// which is safe because they are never modified in place.
func (r *ImageRecord) withRepository(ref, repo string, rr *RepositoryRecord, now time.Time) *ImageRecord {
	next := &ImageRecord{ImageRef: ref, Updated: now}
	if r != nil {
		next.UnknownOrigin = r.UnknownOrigin
		next.Repositories = maps.Clone(r.Repositories)
	}
	if next.Repositories == nil {
		next.Repositories = make(map[string]*RepositoryRecord, 1)
	}
	next.Repositories[repo] = rr
	return next
}

// withPull returns the record after a successful pull of ref under repo
// with a credential from src (with hash h), applying the merge rules:
// node-level or no credentials make the entry node-accessible (verified
// now) and wipe its lists; a node-accessible entry stays so, unchanged,
// while it is fresh (maxAge 0: always) — a pull with a tenant's credential
// proves nothing about anonymous access, so it never renews it, and an
// expired node-accessible entry is replaced by this credential's; a secret
// is matched by its coordinates (a rotated secret gets its new hash); a
// service account by its coordinates; each list is bounded by max,
// dropping the least recently verified entry.
func (r *ImageRecord) withPull(ref, repo string, src credential.Source, h credential.Hash, now time.Time, max int, maxAge time.Duration) *ImageRecord {
	var cur *RepositoryRecord
	if r != nil {
		cur = r.Repositories[repo]
	}
	if cur != nil && cur.NodeAccessible && !src.NodeAccessible() {
		if maxAge <= 0 || now.Sub(cur.Updated) <= maxAge {
			return r.withRepository(ref, repo, cur, now)
		}
		cur = nil
	}
	var next *RepositoryRecord
	switch {
	case src.NodeAccessible():
		next = &RepositoryRecord{NodeAccessible: true, Updated: now}
	case src.Kind == credential.SourceSecret && !h.IsZero():
		next = cloneOrNew(cur, now)
		entry := SecretEntry{Namespace: src.Namespace, Name: src.Name, UID: src.UID, Hash: h, Verified: now}
		if i := slices.IndexFunc(next.Secrets, func(e SecretEntry) bool { return e.sameObject(src) }); i >= 0 {
			next.Secrets[i] = entry
		} else {
			next.Secrets = appendBounded(next.Secrets, entry, max, func(e SecretEntry) time.Time { return e.Verified })
		}
	case src.Kind == credential.SourceServiceAccount:
		next = cloneOrNew(cur, now)
		entry := ServiceAccountEntry{Namespace: src.Namespace, Name: src.Name, UID: src.UID, Verified: now}
		if i := slices.IndexFunc(next.ServiceAccounts, func(e ServiceAccountEntry) bool { return e.sameObject(src) }); i >= 0 {
			next.ServiceAccounts[i] = entry
		} else {
			next.ServiceAccounts = appendBounded(next.ServiceAccounts, entry, max, func(e ServiceAccountEntry) time.Time { return e.Verified })
		}
	default:
		// An unknown source kind, or a secret whose credential was not
		// hashed, proves nothing: remember that the node
		// pulled the image, with no credential anyone can match.
		next = cloneOrNew(cur, now)
	}
	return r.withRepository(ref, repo, next, now)
}

// withPulledUnknown returns the record with repo marked as pulled by the
// node with no known credential (a leftover pull intent), unless repo
// already has an entry.
func (r *ImageRecord) withPulledUnknown(ref, repo string, now time.Time) *ImageRecord {
	if r != nil && r.Repositories[repo] != nil {
		return r
	}
	return r.withRepository(ref, repo, &RepositoryRecord{Updated: now}, now)
}

// withSecretCoordinates returns the record with an entry for the secret
// at coordinates src under repo, bound to the hash and verification time
// of matched (an entry whose hash the registry accepted). It returns r
// itself if repo has no entry still holding matched's hash, or already
// has one for src.
func (r *ImageRecord) withSecretCoordinates(repo string, src credential.Source, matched SecretEntry, max int) *ImageRecord {
	cur := r.Repositories[repo]
	if cur == nil || matched.Hash.IsZero() ||
		!slices.ContainsFunc(cur.Secrets, func(e SecretEntry) bool { return e.Hash == matched.Hash }) ||
		slices.ContainsFunc(cur.Secrets, func(e SecretEntry) bool { return e.sameObject(src) }) {
		return r
	}
	next := cur.clone()
	entry := SecretEntry{Namespace: src.Namespace, Name: src.Name, UID: src.UID, Hash: matched.Hash, Verified: matched.Verified}
	next.Secrets = appendBounded(next.Secrets, entry, max, func(e SecretEntry) time.Time { return e.Verified })
	// Updated is left as it is: nothing was verified.
	return r.withRepository(r.ImageRef, repo, next, r.Updated)
}

// without returns the record with every secret and service account entry
// for which drop reports true removed, and whether anything changed. The
// repository entries stay, so the image still counts as pulled by the node.
func (r *ImageRecord) without(dropSecret func(SecretEntry) bool, dropSA func(ServiceAccountEntry) bool, now time.Time) (*ImageRecord, bool) {
	var next *ImageRecord
	for name, rr := range r.Repositories {
		secrets := slices.DeleteFunc(slices.Clone(rr.Secrets), dropSecret)
		sas := slices.DeleteFunc(slices.Clone(rr.ServiceAccounts), dropSA)
		if len(secrets) == len(rr.Secrets) && len(sas) == len(rr.ServiceAccounts) {
			continue
		}
		if next == nil {
			next = &ImageRecord{ImageRef: r.ImageRef, UnknownOrigin: r.UnknownOrigin, Repositories: maps.Clone(r.Repositories)}
		}
		next.Repositories[name] = &RepositoryRecord{NodeAccessible: rr.NodeAccessible, Secrets: secrets, ServiceAccounts: sas, Updated: now}
	}
	if next == nil {
		return r, false
	}
	next.Updated = now
	return next, true
}

func cloneOrNew(cur *RepositoryRecord, now time.Time) *RepositoryRecord {
	if cur == nil {
		return &RepositoryRecord{Updated: now}
	}
	next := cur.clone()
	next.Updated = now
	return next
}

// appendBounded appends e, first dropping the entry with the oldest
// verification time if the list is full.
func appendBounded[E any](list []E, e E, max int, verified func(E) time.Time) []E {
	if max > 0 && len(list) >= max {
		oldest := 0
		for i := range list {
			if verified(list[i]).Before(verified(list[oldest])) {
				oldest = i
			}
		}
		list = slices.Delete(list, oldest, oldest+1)
	}
	return append(list, e)
}
