package registry

import (
	"sync"
	"time"
)

// DefaultRequestLogSize is how many requests the registry remembers unless
// WithRequestLogSize says otherwise.
const DefaultRequestLogSize = 1 << 16

// Request is one request the registry answered. It never holds a password
// or an Authorization header.
type Request struct {
	// Time is when the request arrived, by the registry's clock.
	Time time.Time
	// Duration is how long the registry took to answer.
	Duration time.Duration
	// Method is the HTTP method.
	Method string
	// Path is the URL path, without the query.
	Path string
	// Kind is the part of the API the path belongs to.
	Kind Kind
	// Repository is the repository name; empty for base, catalog and
	// other requests.
	Repository string
	// Reference is the tag or digest of a manifest, the digest of a blob,
	// or the upload session id; empty otherwise.
	Reference string
	// Status is the HTTP status answered.
	Status int
	// Bytes is the number of body bytes answered.
	Bytes int64
	// User is the authenticated user; empty when the request carried no
	// credentials or credentials that were rejected.
	User string
	// Claimed is the user name the request's Basic credentials named,
	// accepted or not; empty when it carried none.
	Claimed string
}

// Anonymous reports whether the request carried no credentials.
func (r Request) Anonymous() bool { return r.Claimed == "" }

// Filter selects requests. Every non-zero field must match; the zero
// Filter matches every request.
type Filter struct {
	Kind       Kind
	Method     string
	Repository string
	Reference  string
	Status     int
	// User matches the authenticated user.
	User string
	// Anonymous, when set, matches only requests without credentials.
	Anonymous bool
}

// Match reports whether f selects r.
func (f Filter) Match(r Request) bool {
	return (f.Kind == "" || f.Kind == r.Kind) &&
		(f.Method == "" || f.Method == r.Method) &&
		(f.Repository == "" || f.Repository == r.Repository) &&
		(f.Reference == "" || f.Reference == r.Reference) &&
		(f.Status == 0 || f.Status == r.Status) &&
		(f.User == "" || f.User == r.User) &&
		(!f.Anonymous || r.Anonymous())
}

// requestLog keeps the most recent requests in completion order.
type requestLog struct {
	mu      sync.Mutex
	limit   int
	entries []Request
	dropped int
}

func (l *requestLog) add(r Request) {
	if l.limit == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) >= l.limit {
		// Reslicing keeps appends amortized O(1): append copies only the
		// live entries when it grows the backing array.
		l.entries = l.entries[1:]
		l.dropped++
	}
	l.entries = append(l.entries, r)
}

func (l *requestLog) snapshot() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Request(nil), l.entries...)
}

func (l *requestLog) count(f Filter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.entries {
		if f.Match(r) {
			n++
		}
	}
	return n
}

func (l *requestLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = nil
	l.dropped = 0
}

func (l *requestLog) droppedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}
