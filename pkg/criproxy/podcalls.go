package criproxy

import (
	"sync"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/credential"
)

// The two annotations the kubelet puts on every pod, from every source,
// over whatever the pod carried (k8s.io/kubernetes v1.36,
// pkg/kubelet/config/config.go: the source on every add and update,
// recordFirstSeenTime on the first add, both kept on updates), and which
// EnsureImageExists copies, with all the pod's annotations, into the
// ImageSpec of its presence check, of its PullImage and of the size
// look-up after the pull (pkg/kubelet/images). A tenant writes its pod's
// other annotations, not these two.
const (
	annotationSource = "kubernetes.io/config.source"
	annotationSeen   = "kubernetes.io/config.seen"
)

// maxPodKeyPart bounds each part of a pod key; a longer value is not the
// kubelet's (a source name, an RFC 3339 timestamp, a runtime handler) and
// makes the call an unkeyed one.
const maxPodKeyPart = 256

// callKind is what an ImageStatus or PullImage request says of its caller.
type callKind int

const (
	// bareCall carries no annotation: the kubelet's look-up of a
	// container's user (getImageUser), an administrator's crictl, or a
	// kubelet that sends no pod annotations at all.
	bareCall callKind = iota
	// podCall carries the kubelet's two annotations: a call the kubelet
	// makes for one pod (EnsureImageExists and the size look-up after its
	// pull).
	podCall
	// unkeyedCall carries annotations but not the kubelet's two (another
	// client): treated as a presence check of no particular pod.
	unkeyedCall
)

// classify says what spec says of its caller and, for a podCall, returns
// the pod's key: its config source, its first-seen time and the runtime
// handler (a pod asks with one handler).
func classify(spec *runtimeapi.ImageSpec) (callKind, string) {
	ann := spec.GetAnnotations()
	if len(ann) == 0 {
		return bareCall, ""
	}
	src, seen, handler := ann[annotationSource], ann[annotationSeen], spec.GetRuntimeHandler()
	if src == "" || seen == "" || len(src) > maxPodKeyPart || len(seen) > maxPodKeyPart || len(handler) > maxPodKeyPart {
		return unkeyedCall, ""
	}
	return podCall, src + "\x00" + seen + "\x00" + handler
}

// DefaultAnswerWindow is how long after a pod's presence check reported a
// present image absent the pod's PullImage of that image may be answered
// from a record. The kubelet asks first only for IfNotPresent and Never
// containers and image volumes; it pulls Always containers without
// asking. So a pull that follows no presence check of its pod is an
// Always pull: it is forwarded, so that the registry is asked and a moved
// tag is followed, as the kubelet's own implementation does for Always.
// The window is long because the kubelet's pulls may queue behind others
// (serializeImagePulls).
const DefaultAnswerWindow = 10 * time.Minute

// maxWindows bounds, each, the answer windows, the memo of normalized
// names and the pod keys seen to collide. When one is full, the oldest
// window, the least recently used name and the oldest collision make room
// for the new one: a tenant that opens window after window (pods of Never
// containers that name many present tags) costs another pod its window
// only once maxWindows windows were opened after it. A presence check
// carries the pod's annotations but not its namespace, so no bound per
// tenant is possible at that call.
const maxWindows = 10000

// maxProofs bounds the proofs remembered, the least recently used making
// room. A pull's proof is kept twice: under the name pulled (the pod's
// presence checks) and under the image ID it got (the kubelet's look-up of
// an image volume's digest, which asks by ID).
const maxProofs = 2 * maxWindows

// The kinds of entry podCalls forgets to make room (the evictions metric).
const (
	evictedWindow    = "window"
	evictedProof     = "proof"
	evictedName      = "name"
	evictedCollision = "collision"
)

// statusTTL is how long the image status behind an "absent" answer is
// reused by the PullImage that follows it (the kubelet pulls right after
// asking, unless its pulls queue), instead of asking the runtime again.
// A stale status costs nothing unsafe: the decision still needs a record
// of this credential for that image under this name.
const statusTTL = 10 * time.Second

// maxKeptNames bounds the names of the status a window keeps for its pull
// (an image has a few; a tenant can give one thousands, under tags of its
// registry, and each pod's presence check opens a window of its own).
const maxKeptNames = 16

// podCalls remembers, per image and pod, what the kubelet's calls for
// that pod established:
//
//   - an answer window: ImageStatus reported the present image absent to
//     the pod's presence check, so the PullImage that follows is the
//     pod's IfNotPresent pull (the kubelet asks nothing before an Always
//     pull) and may be answered from a record. A window serves the pod's
//     pulls until one succeeds.
//   - a proof: the pod's pull of the image succeeded (answered from a
//     record, or forwarded and accepted by the registry), with a
//     credential whose keyed hash is kept (never the credential). Its
//     later presence checks (a restarted container, an image volume on
//     every sync, the size look-up right after the pull) are decided with
//     that credential, as the kubelet's own gate decides with the pod's
//     credentials: the image is reported present while the records still
//     grant it to that credential. So is its look-up by the image ID that
//     pull got (an image volume's digest, for the pod's status).
//
// Calls of no pod (bareCall before the kubelet showed it annotates, and
// unkeyedCall) share one window per image name, pod "".
//
// Every map is bounded and makes room by forgetting its oldest or least
// recently used entry (see maxWindows, maxProofs), never by clearing; each
// operation is O(1).
type podCalls struct {
	window time.Duration

	mu sync.Mutex
	// open holds the answer windows, the oldest forgotten first: a
	// presence check puts its window first, a pull's look-up leaves it
	// in its place.
	open *recent[callKey, openWindow]
	// statusEpoch is counted up when an image is removed: a window's
	// status is reused only in the epoch it was kept in.
	statusEpoch uint64
	// proofs, the least recently used forgotten first.
	proofs *recent[callKey, proof]
	// owners holds, for each pod key with proofs, the pod (sandbox UID)
	// they came from and how many there are; a key's entry goes with its
	// last proof, so a proof never outlives its key's owner and owners
	// is bounded by maxProofs.
	owners map[string]owner
	// collided holds the keys two pods were seen to share, which get no
	// answer from a proof again.
	collided *recent[string, struct{}]
	// keys memoizes normalizedKey (a name parse per call otherwise). A
	// pure function's results: what it holds never depends on who asked.
	keys *recent[string, string]

	// annotating is set at the first podCall: the kubelet sends its
	// presence checks annotated, so a bareCall is a look-up.
	annotating atomic.Bool

	// noProofs: the node's clock may give two pods one config.seen
	// (finestClockStep), so a proof answers nothing; it still keeps the
	// pod from an answer window.
	noProofs bool
	// onCollision is told of a key two pods share (a log line).
	onCollision func()
	// onEvict is told of each entry forgotten to make room, by kind (an
	// expired window is not counted): the evictions metric.
	onEvict func(kind string)
	// onWindows is told how many answer windows are held after a change
	// (the answer_windows gauge).
	onWindows func(n int)
}

type callKey struct {
	image, pod string
	// byID: image is the ID the pod's pull got (a proof for a look-up by
	// ID), not a normalized name.
	byID bool
}

type openWindow struct {
	at    time.Time
	id    string // the status behind the answer, reused for statusTTL
	names []string
	epoch uint64 // podCalls.statusEpoch when the status was kept
}

type proof struct {
	id   string                // the image the pull got
	cred credential.Credential // Registry and Hash only; zero for an anonymous pull
	// name is the normalized name pulled, for a proof kept by ID.
	name string
}

type owner struct {
	uid    string
	proofs int
}

// newPodCalls returns podCalls with answer windows of window, each map
// bounded by n (maxWindows; the proofs by 2n).
func newPodCalls(window time.Duration, n int) *podCalls {
	return &podCalls{window: window,
		open: newRecent[callKey, openWindow](n), proofs: newRecent[callKey, proof](2 * n),
		owners: map[string]owner{}, collided: newRecent[string, struct{}](n), keys: newRecent[string, string](n),
		onCollision: func() {}, onEvict: func(string) {}, onWindows: func(int) {}}
}

// maxClockStep is the coarsest clock step at which the kubelet's
// config.seen still tells pods apart: it stamps the pods of one update one
// after another (recordFirstSeenTime, then formatting the time, hundreds
// of nanoseconds each), so two stamps are equal only if the clock did not
// advance in between.
const maxClockStep = 100 * time.Nanosecond

// finestClockStep is the smallest step the wall clock was seen to take
// between successive readings: a few tens of nanoseconds on a clock of
// nanosecond resolution, a tick (milliseconds) on a jiffies clock.
func finestClockStep() time.Duration {
	finest := time.Duration(1<<63 - 1)
	prev := time.Now().UnixNano()
	for range 20000 {
		now := time.Now().UnixNano()
		if d := time.Duration(now - prev); d > 0 && d < finest {
			finest = d
		}
		prev = now
	}
	return finest
}

// maxMemoName bounds the names key memoizes (an image name is at most
// a few hundred bytes; anything longer is normalized each time).
const maxMemoName = 1024

// key is (normalizedKey(image), pod), memoized; p.mu must be held.
func (p *podCalls) key(image, pod string) callKey {
	if len(image) > maxMemoName {
		return callKey{image: normalizedKey(image), pod: pod}
	}
	if k, ok := p.keys.get(image); ok {
		return callKey{image: *k, pod: pod}
	}
	k := normalizedKey(image)
	if _, evicted, _ := p.keys.put(image, k); evicted {
		p.onEvict(evictedName) // forgetting costs one parse
	}
	return callKey{image: k, pod: pod}
}

// hid notes that ImageStatus reported image absent to pod's presence
// check (pod "": to a call of no pod), with the status behind the answer.
// The window is the newest; in a full map the oldest makes room (an open
// one is counted: its pull goes to the registry).
func (p *podCalls) hid(image, pod string, now time.Time, id string, names []string) {
	if len(names) > maxKeptNames {
		id, names = "", nil // the pull asks the runtime again
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Expired windows go first, the oldest at the back (a window is put
	// first when opened and left in its place after): the count held is
	// of windows a pull may still use.
	for k, old, ok := p.open.oldest(); ok && p.window > 0 && now.Sub(old.at) > p.window; k, old, ok = p.open.oldest() {
		p.open.remove(k)
	}
	w := openWindow{at: now, id: id, names: names, epoch: p.statusEpoch}
	if old, evicted, _ := p.open.put(p.key(image, pod), w); evicted && now.Sub(old.val.at) <= p.window {
		p.onEvict(evictedWindow)
	}
	p.onWindows(p.open.len())
}

// take reports whether a pull of image by pod may be answered from a
// record: a window that pod's presence check opened is open (it stays
// open while the kubelet tries the pod's credentials in turn, and closes
// at the first that succeeds: see proved). It returns the status behind
// the answer if it is younger than statusTTL and no image was removed
// since (id "" otherwise). With no window configured every pull may be.
func (p *podCalls) take(image, pod string, now time.Time) (ok bool, id string, names []string) {
	if p.window <= 0 {
		return true, "", nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.key(image, pod)
	w, found := p.open.peek(k)
	if !found {
		return false, "", nil
	}
	if now.Sub(w.at) > p.window {
		p.open.remove(k)
		p.onWindows(p.open.len())
		return false, "", nil
	}
	if now.Sub(w.at) > statusTTL || w.epoch != p.statusEpoch {
		return true, "", nil
	}
	return true, w.id, w.names
}

// forget drops the status behind image's window of no pod (a pull may
// move the tag), keeping the window in its place.
func (p *podCalls) forget(image string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.open.peek(p.key(image, "")); ok {
		w.id, w.names = "", nil
	}
}

// forgetStatuses drops every status behind an open window (an image was
// removed).
func (p *podCalls) forgetStatuses() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.statusEpoch++
}

// proved notes that pod's pull of image got the image id with cred
// (anonymous: the zero credential); uid is the pulling pod's sandbox UID.
// The proof is kept under the name and under id. A key that a pull of
// another pod (another UID) already proved with is one two pods share: it
// gets no answer from a proof again.
func (p *podCalls) proved(image, pod, uid, id string, cred credential.Credential) {
	if pod == "" {
		return
	}
	var kept credential.Credential // anonymous: the zero hash, which matches nothing
	if !cred.Anonymous() {
		kept = credential.Credential{Registry: cred.Registry, Hash: cred.Hash}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.key(image, pod)
	p.open.remove(k) // the presence check's pull is done
	p.onWindows(p.open.len())
	o, seen := p.owners[pod]
	if uid == "" || (seen && o.uid != uid) {
		if _, marked := p.collided.peek(pod); !marked {
			if _, evicted, _ := p.collided.put(pod, struct{}{}); evicted {
				p.onEvict(evictedCollision) // a collision is rare: a clock too coarse is caught at the start
			}
			p.onCollision()
		}
	}
	o.uid = uid
	p.owners[pod] = o
	p.keep(k, proof{id: id, cred: kept})
	if id != "" {
		p.keep(callKey{image: id, pod: pod, byID: true}, proof{id: id, cred: kept, name: k.image})
	}
}

// keep puts a proof first, counting it for its pod key's owner; in a full
// map the least recently used proof makes room, and the owner of a key
// left with none goes. p.mu must be held.
func (p *podCalls) keep(k callKey, pr proof) {
	old, evicted, added := p.proofs.put(k, pr)
	if added {
		o := p.owners[k.pod]
		o.proofs++
		p.owners[k.pod] = o
	}
	if !evicted {
		return
	}
	p.onEvict(evictedProof) // forgetting costs the pod one pull, answered from its record
	if o := p.owners[old.key.pod]; o.proofs <= 1 {
		delete(p.owners, old.key.pod)
	} else {
		o.proofs--
		p.owners[old.key.pod] = o
	}
}

// answers reports whether pod's proofs may answer its calls. p.mu must be
// held.
func (p *podCalls) answers(pod string) bool {
	if p.noProofs {
		return false
	}
	_, collided := p.collided.peek(pod)
	return !collided
}

// proofOf returns the credential pod's pull of image proved, if that pull
// got the image id (ok). held reports whether pod's pull of image
// succeeded at all, whatever image it got.
func (p *podCalls) proofOf(image, pod, id string) (cred credential.Credential, held, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, held := p.proofs.get(p.key(image, pod))
	if !held || pr.id != id || !p.answers(pod) {
		return credential.Credential{}, held, false
	}
	return pr.cred, true, true
}

// proofByID returns the name and the credential of pod's pull that got
// the image id, if it succeeded (held) and may answer (ok): the pod's
// look-up of that image by its ID.
func (p *podCalls) proofByID(pod, id string) (name string, cred credential.Credential, held, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, held := p.proofs.get(callKey{image: id, pod: pod, byID: true})
	if !held || !p.answers(pod) {
		return "", credential.Credential{}, held, false
	}
	return pr.name, pr.cred, true, true
}
