package credtracker

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/pkg/credential"
)

// tracker is the Tracker for the enabled feature.
//
// Reads are lock-free: images, the in-memory records (index.go), is read
// without a lock. Writers serialize on writeMu, the only lock over the
// records in memory and on disk: it is held across the durable write so
// that memory and disk change in the same order. The in-flight intent
// counts have their own small lock, never held across I/O.
type tracker struct {
	policy     Policy
	allowlist  *Allowlist
	maxAge     time.Duration
	maxEntries int
	clock      clock.PassiveClock
	logger     klog.Logger
	store      *store
	hasher     *credential.Hasher

	images   *recordIndex
	degraded atomic.Bool
	count    atomic.Int64 // records in memory

	diskCount int // records on disk, guarded by writeMu

	writeMu sync.Mutex

	intentMu sync.Mutex
	intents  map[string]int // normalized image -> pulls in flight
	inflight map[string]int // repository name -> pulls in flight
	// (intents answers "is this image being pulled?", as the kubelet's
	// intent counters do; inflight answers it for a pod that names a
	// digest of the repository, which a pull by tag may be storing.)

	status Status // guarded by writeMu after start-up

	// missHook, when set (by this package's tests only), runs in Decide
	// right after a look-up that found no record under the pod's name.
	missHook func()

	// writeFault, when set (by this package's tests only), fails the
	// durable writes it returns an error for, before they reach the store.
	writeFault func(op string) error
}

var _ Tracker = (*tracker)(nil)

// Hasher returns the node-local credential hasher the tracker's records
// were made with; keyrings must hash credentials with it.
func (t *tracker) Hasher() *credential.Hasher { return t.hasher }

func (t *tracker) Decide(req Request) Decision {
	d := t.decide(req)
	countCheck(d)
	return d
}

func (t *tracker) decide(req Request) Decision {
	if req.PullPolicy == corev1.PullAlways {
		return Decision{Action: Pull, Reason: ReasonAlways}
	}
	if req.ImageRef == "" {
		return deny(req, ReasonAbsent)
	}
	if t.policy == NeverVerify {
		return Decision{Action: UseImage, Reason: ReasonPolicyNeverVerify}
	}
	repo, err := RepositoryName(req.Image)
	if err != nil {
		return deny(req, ReasonInvalidImageName)
	}

	rv, ok := t.images.loadRepository(req.ImageRef, repo)
	if !ok {
		if t.missHook != nil {
			t.missHook()
		}
		// The node had no record of pulling this image under this name
		// when it looked. A pull may have ended since: a writer stores its
		// record before it leaves the in-flight counts, so the counts are
		// read first, and the records again after them. Whatever was in
		// flight then has either ended (and is in the records read now)
		// or is counted.
		named := namedBy(repo, req.Names)
		inFlight, anyInFlight := t.pullsInFlight(req.Image, repo)
		anyInFlight = anyInFlight && !named
		if rv, ok = t.images.loadRepository(req.ImageRef, repo); ok {
			return t.match(req, repo, rv)
		}
		g, rec := t.images.loadGroup(req.ImageRef)
		switch {
		case rec && g.unknownOrigin():
			return deny(req, ReasonUnknownOrigin)
		case t.degraded.Load() || t.images.full.Load():
			return deny(req, ReasonRecordsUnreadable)
		case inFlight:
			return deny(req, ReasonPullInFlight)
		case anyInFlight:
			// The pod reaches the image by something that is not one of
			// its names (an image ID), and the node is pulling: the image
			// may be the one being pulled, not yet recorded.
			return deny(req, ReasonPullInFlight)
		case rec && !named:
			// The node pulled this image under other names, and the pod
			// reaches it by something that is not one of its names (an
			// image ID, say): it is not preloaded under this name.
			return deny(req, ReasonUnlistedName)
		case t.policy == AlwaysVerify:
			return deny(req, ReasonAlwaysVerify)
		case t.policy == NeverVerifyAllowlistedImages && !t.allowlist.Match(repo):
			return deny(req, ReasonNotAllowlisted)
		case t.policy == NeverVerifyAllowlistedImages && req.Names != nil && !named:
			// The allowlist frees a preloaded image under its own names
			// only: a runtime also finds an image by its ID or a unique
			// prefix of it ("3f2a9c"), which reads as the allowlistable
			// docker.io/library/3f2a9c.
			return deny(req, ReasonUnlistedName)
		case t.policy == NeverVerifyAllowlistedImages:
			return Decision{Action: UseImage, Reason: ReasonAllowlisted}
		default:
			return Decision{Action: UseImage, Reason: ReasonPreloaded}
		}
	}
	return t.match(req, repo, rv)
}

// match applies rule 4: may the pod use an image the node pulled under
// this name, with what it can show? The pod's credentials are asked for
// only when the entry lists a secret or a service account to match.
func (t *tracker) match(req Request, repo string, rv repoView) Decision {
	var oldest int64 // the oldest verification time still fresh
	if t.maxAge > 0 {
		oldest = t.clock.Now().UnixNano() - int64(t.maxAge)
	}
	expired := false
	fresh := func(verified int64) bool {
		if t.maxAge <= 0 || (verified != 0 && verified >= oldest) {
			return true
		}
		expired = true
		return false
	}
	if rv.nodeAccessible() && fresh(rv.updated()) {
		return Decision{Action: UseImage, Reason: ReasonNodeAccessible}
	}
	nSecrets := rv.secrets()
	if req.Credentials == nil || (nSecrets == 0 && rv.serviceAccounts() == 0) {
		return deny(req, noMatch(expired))
	}
	creds := req.Credentials()
	// A hash proves access across pods and namespaces: every hash in the
	// entry was accepted by the registry. The zero hash (a credential
	// nobody hashed) proves nothing and matches nothing.
	for i := range creds {
		h := &creds[i].Hash
		if h.IsZero() {
			continue
		}
		for j := range nSecrets {
			if rv.hashIs(j, h) && fresh(rv.secretVerified(j)) {
				if src := &creds[i].Source; unlistedSecret(src, &rv) {
					t.rememberCoordinates(req.ImageRef, repo, *src, rv, j)
				}
				return Decision{Action: UseImage, Reason: ReasonCredentialMatch}
			}
		}
	}
	// The same secret (namespace, name and uid), whatever it holds now: a
	// rotation is honoured for this secret only. Its new content is not
	// remembered as proof, so it grants nothing to anyone else until the
	// registry accepts it.
	for i := range creds {
		src := creds[i].Source
		switch src.Kind {
		case credential.SourceSecret:
			if rv.findSecret(src, func(j int) bool { return fresh(rv.secretVerified(j)) }) {
				return Decision{Action: UseImage, Reason: ReasonSecretRotated}
			}
		case credential.SourceServiceAccount:
			if rv.findServiceAccount(src, func(j int) bool { return fresh(rv.saVerified(j)) }) {
				return Decision{Action: UseImage, Reason: ReasonServiceAccount}
			}
		}
	}
	return deny(req, noMatch(expired))
}

// namedBy reports whether repo is the repository of one of names.
func namedBy(repo string, names []string) bool {
	for _, n := range names {
		if r, err := RepositoryName(n); err == nil && r == repo {
			return true
		}
	}
	return false
}

func noMatch(expired bool) Reason {
	if expired {
		return ReasonExpired
	}
	return ReasonNoMatch
}

// deny is the outcome when the pod must prove access: a pull for
// IfNotPresent, ErrImageNeverPull for Never.
func deny(req Request, reason Reason) Decision {
	if req.PullPolicy == corev1.PullNever {
		return Decision{Action: FailNeverPull, Reason: reason}
	}
	return Decision{Action: Pull, Reason: reason}
}

// pullsInFlight reports whether a pull of image (of repository repo) is
// in flight, and whether a pull of any image is, in one look at the
// counts. An image is counted per name, as the kubelet counts its pull
// intents: a pull of team/tool:v2 does not hold up team/tool:v1, which
// names another image ("alpine" and "alpine:latest" are one name). A pod
// that names a digest is held up by any pull of its repository: a pull by
// tag may be storing that very digest, not yet recorded.
func (t *tracker) pullsInFlight(image, repo string) (ofImage, ofAny bool) {
	key, _, err := normalizedImage(image)
	t.intentMu.Lock()
	defer t.intentMu.Unlock()
	switch {
	case err != nil || strings.Contains(key[len(repo):], "@"):
		// (decide parsed the name already: err is never set here.)
		ofImage = t.inflight[repo] > 0
	case key == repo:
		ofImage = t.intents[key] > 0 || t.intents[key+":latest"] > 0
	case key == repo+":latest":
		ofImage = t.intents[key] > 0 || t.intents[repo] > 0
	default:
		ofImage = t.intents[key] > 0
	}
	return ofImage, len(t.intents) > 0
}

// unlistedSecret reports whether src, the source of a credential that
// matched one of rv's hashes, is a pull secret (with a namespace and a
// name) whose coordinates rv does not list yet: rememberCoordinates' case.
func unlistedSecret(src *credential.Source, rv *repoView) bool {
	return src.Kind == credential.SourceSecret && src.Namespace != "" && src.Name != "" && !rv.listsSecret(src)
}

// rememberCoordinates records the coordinates of a pull secret admitted
// because its content matched a registry-accepted hash, bound to that hash
// and to the time the registry accepted it, so that a later rotation of
// that secret is honoured (as the kubelet does). It is a write, done once
// per secret and image; a failure is logged: the hash still matches. It
// is called for an unlistedSecret only.
func (t *tracker) rememberCoordinates(ref, repo string, src credential.Source, rv repoView, j int) {
	matched := SecretEntry{Hash: rv.secretHash(j), Verified: fromUnixNano(rv.secretVerified(j))}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	cur := t.images.load(ref)
	if cur == nil {
		return
	}
	next := cur.withSecretCoordinates(repo, src, matched, t.maxEntries)
	if next == cur {
		return
	}
	t.images.store(next)
	if err := t.write("adopt", func() error { return t.store.apply([]*ImageRecord{next}, nil, nil) }); err != nil {
		t.logger.Error(err, "Failed to store a matching secret's coordinates; its holders will match by hash only", "imageRef", ref, "repository", repo, "secret", klog.KRef(src.Namespace, src.Name))
	}
}

func (t *tracker) RecordPullIntent(image string) error {
	key, repo, err := normalizedImage(image)
	if err != nil {
		return fmt.Errorf("failed to record pull intent: %w", err)
	}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	t.intentMu.Lock()
	first := t.intents[key] == 0
	t.intents[key]++
	t.inflight[repo]++
	t.intentMu.Unlock()
	if !first {
		return nil
	}
	if err := t.write("intent", func() error { return t.store.putIntent(key, t.clock.Now()) }); err != nil {
		t.releaseIntent(key, repo)
		return fmt.Errorf("failed to record pull intent for %q: %w", image, err)
	}
	t.status.Intents++
	intentsGauge.Set(float64(t.status.Intents))
	return nil
}

func (t *tracker) RecordImagePulled(image, imageRef string, cred credential.Credential) error {
	key, repo, err := normalizedImage(image)
	if err != nil {
		return fmt.Errorf("failed to record pulled image: %w", err)
	}
	if imageRef == "" {
		return fmt.Errorf("failed to record pulled image %q: empty image ref", image)
	}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()

	cur := t.images.load(imageRef)
	next := cur.withPull(imageRef, repo, cred.Source, cred.Hash, t.clock.Now(), t.maxEntries, t.maxAge)
	// Memory first, then the intent count: at no instant is the pull
	// neither in flight nor recorded.
	t.images.store(next)
	if cur == nil {
		t.setMemoryCount(t.count.Add(1))
	}
	last := t.releaseIntent(key, repo)
	intentKey := ""
	if last {
		intentKey = key
	}
	err = t.write("record", func() error { return t.store.putRecord(next, intentKey) })
	if err != nil {
		// The record and the intent's removal were one transaction, so
		// the intent is still on disk: it is the only trace of this pull
		// that survives a restart. Pin it, so that no later pull of the
		// image removes it.
		t.pinIntent(key, repo)
		return fmt.Errorf("failed to store the record of %q (%s): %w", image, imageRef, err)
	}
	if cur == nil {
		t.setDiskCount(t.diskCount + 1)
	}
	if last {
		t.status.Intents--
		intentsGauge.Set(float64(t.status.Intents))
	}
	return nil
}

func (t *tracker) RecordImagePullFailed(image string) error {
	key, repo, err := normalizedImage(image)
	if err != nil {
		return fmt.Errorf("failed to resolve pull intent: %w", err)
	}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if !t.releaseIntent(key, repo) {
		return nil
	}
	if err := t.write("intent", func() error { return t.store.deleteIntent(key) }); err != nil {
		// A leftover intent only asks for more verification after a restart.
		return fmt.Errorf("failed to remove pull intent for %q: %w", image, err)
	}
	t.status.Intents--
	intentsGauge.Set(float64(t.status.Intents))
	return nil
}

// pinIntent counts one more pull of key in flight that never ends (until
// a restart resolves its intent from disk): the intent stays on disk, and
// this image, and digests of its repository, need verification while
// no record names them.
func (t *tracker) pinIntent(key, repo string) {
	t.intentMu.Lock()
	defer t.intentMu.Unlock()
	t.intents[key]++
	t.inflight[repo]++
}

// releaseIntent decrements the in-flight counts and reports whether this
// was the last pull of key in flight.
func (t *tracker) releaseIntent(key, repo string) (last bool) {
	t.intentMu.Lock()
	defer t.intentMu.Unlock()
	if t.intents[key] == 0 {
		return false
	}
	t.intents[key]--
	if t.intents[key] == 0 {
		delete(t.intents, key)
		last = true
	}
	if t.inflight[repo]--; t.inflight[repo] <= 0 {
		delete(t.inflight, repo)
	}
	return last
}

// write runs one durable store operation, timing it and counting failures.
func (t *tracker) write(op string, fn func() error) error {
	start := time.Now()
	var err error
	if t.writeFault != nil {
		err = t.writeFault(op)
	}
	if err == nil {
		err = fn()
	}
	writeDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		storeErrorsTotal.WithLabelValues(op).Inc()
	}
	return err
}

func (t *tracker) setMemoryCount(n int64) {
	recordsGauge.WithLabelValues("memory").Set(float64(n))
}

// setDiskCount must be called with writeMu held.
func (t *tracker) setDiskCount(n int) {
	t.diskCount = n
	recordsGauge.WithLabelValues("disk").Set(float64(n))
}

func (t *tracker) Records() []ImageRecord {
	// Writers hold writeMu: the walk sees every record exactly once.
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	var out []ImageRecord
	t.images.each(func(g groupView) { out = append(out, *g.record()) })
	slices.SortFunc(out, func(a, b ImageRecord) int { return strings.Compare(a.ImageRef, b.ImageRef) })
	return out
}

func (t *tracker) Status() Status {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	s := t.status
	s.Records = int(t.count.Load())
	s.Degraded = t.degraded.Load() || t.images.full.Load()
	return s
}

func (t *tracker) Close() error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	return t.store.close()
}
