package criproxy

import (
	"sync"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criruntime"
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

// maxWindows bounds the answer windows and the proofs remembered (each).
const maxWindows = 10000

// proofIdle is how long a proof unused for is the first forgotten when
// the proofs are full.
const proofIdle = DefaultAnswerWindow

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
//     grant it to that credential.
//
// Calls of no pod (bareCall before the kubelet showed it annotates, and
// unkeyedCall) share one window per image name, pod "".
type podCalls struct {
	window time.Duration

	mu     sync.Mutex
	open   map[callKey]openWindow
	proofs map[callKey]proof
	// keys memoizes normalizedKey (a name parse per call otherwise);
	// bounded by maxWindows, cleared when full. A pure function's results:
	// what it holds never depends on who asked.
	keys map[string]string

	// annotating is set at the first podCall: the kubelet sends its
	// presence checks annotated, so a bareCall is a look-up.
	annotating atomic.Bool

	// noProofs: the node's clock may give two pods one config.seen
	// (finestClockStep), so a proof answers nothing; it still keeps the
	// pod from an answer window.
	noProofs bool
	// owners is the pod (sandbox UID) each pod key's proofs came from;
	// collided holds the keys two pods were seen to share, which get no
	// answer from a proof again. Both bounded by maxWindows.
	owners   map[string]string
	collided map[string]bool
	// onCollision is told of a key two pods share (a log line).
	onCollision func()
}

type callKey struct{ image, pod string }

type openWindow struct {
	at    time.Time
	id    string // the status behind the answer, reused for statusTTL
	names []string
}

type proof struct {
	id   string                // the image the pull got
	cred credential.Credential // Registry and Hash only; zero for an anonymous pull
	used time.Time
}

func newPodCalls(window time.Duration) *podCalls {
	return &podCalls{window: window, open: map[callKey]openWindow{}, proofs: map[callKey]proof{}, keys: map[string]string{},
		owners: map[string]string{}, collided: map[string]bool{}, onCollision: func() {}}
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
		return callKey{normalizedKey(image), pod}
	}
	k, ok := p.keys[image]
	if !ok {
		k = normalizedKey(image)
		if len(p.keys) >= maxWindows {
			clear(p.keys) // forgetting costs one parse
		}
		p.keys[image] = k
	}
	return callKey{k, pod}
}

// normalizedKey normalizes an image name, so that "alpine" and
// "docker.io/library/alpine:latest" are one image.
func normalizedKey(image string) string {
	if n, err := criruntime.NormalizeImage(image); err == nil {
		return n
	}
	return image
}

// hid notes that ImageStatus reported image absent to pod's presence
// check (pod "": to a call of no pod), with the status behind the answer.
func (p *podCalls) hid(image, pod string, now time.Time, id string, names []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.open) >= maxWindows {
		for k, w := range p.open {
			if now.Sub(w.at) > p.window {
				delete(p.open, k)
			}
		}
		if len(p.open) >= maxWindows {
			// Forgetting only costs a forwarded pull (one manifest request).
			clear(p.open)
		}
	}
	if len(names) > maxKeptNames {
		id, names = "", nil // the pull asks the runtime again
	}
	p.open[p.key(image, pod)] = openWindow{at: now, id: id, names: names}
}

// take reports whether a pull of image by pod may be answered from a
// record: a window that pod's presence check opened is open (it stays
// open while the kubelet tries the pod's credentials in turn, and closes
// at the first that succeeds: see proved). It returns the status behind the answer if it is younger than statusTTL
// (id "" otherwise). With no window configured every pull may be.
func (p *podCalls) take(image, pod string, now time.Time) (ok bool, id string, names []string) {
	if p.window <= 0 {
		return true, "", nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.key(image, pod)
	w, found := p.open[k]
	if !found || now.Sub(w.at) > p.window {
		return false, "", nil
	}
	if now.Sub(w.at) > statusTTL {
		return true, "", nil
	}
	return true, w.id, w.names
}

// forget drops the status behind image's window of no pod (a pull may
// move the tag), keeping the window.
func (p *podCalls) forget(image string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.key(image, "")
	if w, ok := p.open[k]; ok {
		w.id, w.names = "", nil
		p.open[k] = w
	}
}

// forgetStatuses drops every status behind an open window (an image was
// removed).
func (p *podCalls) forgetStatuses() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, w := range p.open {
		w.id, w.names = "", nil
		p.open[k] = w
	}
}

// proved notes that pod's pull of image got the image id with cred
// (anonymous: the zero credential); uid is the pulling pod's sandbox UID.
// A key that a pull of another pod (another UID) already proved with is
// one two pods share: its proofs are dropped and it gets none again.
func (p *podCalls) proved(image, pod, uid, id string, cred credential.Credential, now time.Time) {
	if pod == "" {
		return
	}
	var kept credential.Credential // anonymous: the zero hash, which matches nothing
	if !cred.Anonymous() {
		kept = credential.Credential{Registry: cred.Registry, Hash: cred.Hash}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.proofs) >= maxWindows || len(p.owners) >= maxWindows {
		// Forgetting costs a pod one pull, answered from its record. A
		// proof never outlives its key's owner.
		for k, pr := range p.proofs {
			if now.Sub(pr.used) > proofIdle {
				delete(p.proofs, k)
			}
		}
		if len(p.proofs) >= maxWindows || len(p.owners) >= maxWindows {
			clear(p.proofs)
			clear(p.owners)
		}
	}
	k := p.key(image, pod)
	delete(p.open, k) // the presence check's pull is done
	if owner, seen := p.owners[pod]; uid == "" || (seen && owner != uid) {
		if !p.collided[pod] {
			if len(p.collided) >= maxWindows {
				clear(p.collided) // a collision is rare: a clock too coarse is caught at the start
			}
			p.collided[pod] = true
			p.onCollision()
		}
	}
	p.owners[pod] = uid
	p.proofs[k] = proof{id: id, cred: kept, used: now}
}

// proofOf returns the credential pod's pull of image proved, if that pull
// got the image id (ok). held reports whether pod's pull of image
// succeeded at all, whatever image it got.
func (p *podCalls) proofOf(image, pod, id string, now time.Time) (cred credential.Credential, held, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.key(image, pod)
	pr, held := p.proofs[k]
	if !held || pr.id != id || p.noProofs || p.collided[pod] {
		return credential.Credential{}, held, false
	}
	pr.used = now
	p.proofs[k] = pr
	return pr.cred, true, true
}
