package criproxy

import (
	"sync"
	"time"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// DefaultAnswerWindow is how long after ImageStatus reported a present
// image absent a PullImage of that image may be answered from a record.
// The kubelet asks ImageStatus first only for IfNotPresent and Never
// containers; it pulls Always containers without asking. So a pull that
// follows no such answer is an Always pull: it is forwarded, so that the
// registry is asked and a moved tag is followed, as the kubelet's own
// implementation does for Always. The window is long because the
// kubelet's pulls may queue behind others (serializeImagePulls).
const DefaultAnswerWindow = 10 * time.Minute

// maxHidden bounds the images remembered as recently reported absent.
const maxHidden = 10000

// statusTTL is how long the image status behind an "absent" answer is
// reused by the PullImage that follows it (the kubelet pulls right after
// asking, unless its pulls queue), instead of asking the runtime again.
// A stale status costs nothing unsafe: the decision still needs a record
// of this credential for that image under this name.
const statusTTL = 10 * time.Second

// hiddenSet remembers when ImageStatus last reported each image absent
// although it was present, and the runtime's ID and names for it then.
type hiddenSet struct {
	mu     sync.Mutex
	at     map[string]hiddenEntry
	window time.Duration
	// keys memoizes hiddenKey (a name parse per call otherwise, the
	// largest part of the proxy's own time in a forwarded ImageStatus);
	// bounded by maxHidden, cleared when full. A pure function's results:
	// what it holds never depends on who asked.
	keys map[string]string
}

type hiddenEntry struct {
	at     time.Time // last "absent" answer that opened the window
	id     string
	names  []string
	pulled time.Time // last successful PullImage of the image
	// lookups counts the ImageStatus calls still expected from the
	// kubelet after the successful pulls since pulled-userLookupAfter
	// (lookupsPerPull each).
	lookups int
}

// userLookupAfter is how long after a successful PullImage of an image
// the kubelet may ask ImageStatus of it without it being a presence
// check: right after every successful pull the puller asks the image's
// size (GetImageSize), and container creation asks the image's user
// (getImageUser), with nothing that tells either from a presence check
// (k8s.io/kubernetes v1.36, pkg/kubelet/images and
// pkg/kubelet/kuberuntime). The first lookupsPerPull "absent" answers
// after each such pull are taken for those calls and open no answer
// window. Otherwise every container creation, an Always container's
// included, would open the window, and a restarted Always container would
// be answered from its record instead of asking the registry. Taking a
// presence check of another pod for one of them (a kubelet that asks
// fewer, a container creation that fails first) only costs that pod a
// forwarded pull (the registry decides), the safe side.
const userLookupAfter = statusTTL

// lookupsPerPull is how many ImageStatus calls of the image the kubelet
// makes after a successful pull that are not presence checks:
// GetImageSize and getImageUser.
const lookupsPerPull = 2

func newHiddenSet(window time.Duration) *hiddenSet {
	return &hiddenSet{at: map[string]hiddenEntry{}, window: window, keys: map[string]string{}}
}

// maxMemoName bounds the names key memoizes (an image name is at most
// a few hundred bytes; anything longer is normalized each time).
const maxMemoName = 1024

// key is hiddenKey(image), memoized; h.mu must be held.
func (h *hiddenSet) key(image string) string {
	if len(image) > maxMemoName {
		return hiddenKey(image)
	}
	if k, ok := h.keys[image]; ok {
		return k
	}
	k := hiddenKey(image)
	if len(h.keys) >= maxHidden {
		clear(h.keys) // forgetting costs one parse
	}
	h.keys[image] = k
	return k
}

// hiddenKey normalizes an image name, so that "alpine" and
// "docker.io/library/alpine:latest" are one image.
func hiddenKey(image string) string {
	if n, err := criruntime.NormalizeImage(image); err == nil {
		return n
	}
	return image
}

func (h *hiddenSet) mark(image string, now time.Time, id string, names []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := h.key(image)
	e, found := h.at[key]
	if found && e.lookups > 0 && now.Sub(e.pulled) <= userLookupAfter {
		// The kubelet asking the image's size or user; see userLookupAfter.
		e.lookups--
		h.at[key] = e
		return
	}
	if len(h.at) >= maxHidden {
		for k, e := range h.at {
			if now.Sub(e.at) > h.window {
				delete(h.at, k)
			}
		}
		if len(h.at) >= maxHidden {
			// Forgetting only costs a forwarded pull (one manifest request).
			clear(h.at)
		}
	}
	h.at[key] = hiddenEntry{at: now, id: id, names: names}
}

// pulled notes a successful PullImage of image (answered or forwarded),
// after which the kubelet asks the image's size and user; its cached
// status is dropped (the pull may have moved the tag).
func (h *hiddenSet) pulled(image string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := h.key(image)
	e := h.at[key]
	if now.Sub(e.pulled) > userLookupAfter {
		e.lookups = 0
	}
	e.id, e.names, e.pulled = "", nil, now
	e.lookups += lookupsPerPull
	if len(h.at) >= maxHidden {
		if _, ok := h.at[key]; !ok {
			return // full: forgetting only costs a forwarded pull
		}
	}
	h.at[key] = e
}

// recent reports whether image was reported absent within the window, and
// returns the status behind that answer if it is younger than statusTTL
// (id "" otherwise).
func (h *hiddenSet) recent(image string, now time.Time) (ok bool, id string, names []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := h.key(image)
	e, found := h.at[key]
	if !found || now.Sub(e.at) > h.window {
		return false, "", nil
	}
	if now.Sub(e.at) > statusTTL {
		return true, "", nil
	}
	return true, e.id, e.names
}

// forget drops image's cached status (a pull or removal may change it),
// keeping the mark that it was reported absent.
func (h *hiddenSet) forget(image string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := h.key(image)
	if e, ok := h.at[key]; ok {
		e.id, e.names = "", nil
		h.at[key] = e
	}
}

// forgetAll drops every cached status (an image was removed).
func (h *hiddenSet) forgetAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, e := range h.at {
		e.id, e.names = "", nil
		h.at[k] = e
	}
}
