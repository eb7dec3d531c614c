package criproxy

import (
	"sync"
	"time"

	pgruntime "github.com/pullguard/pullguard/pkg/runtime"
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

// hiddenSet remembers when ImageStatus last reported each image absent
// although it was present.
type hiddenSet struct {
	mu     sync.Mutex
	at     map[string]time.Time
	window time.Duration
}

func newHiddenSet(window time.Duration) *hiddenSet {
	return &hiddenSet{at: map[string]time.Time{}, window: window}
}

// key normalizes an image name, so that "alpine" and
// "docker.io/library/alpine:latest" are one image.
func hiddenKey(image string) string {
	if n, err := pgruntime.NormalizeImage(image); err == nil {
		return n
	}
	return image
}

func (h *hiddenSet) mark(image string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.at) >= maxHidden {
		for k, t := range h.at {
			if now.Sub(t) > h.window {
				delete(h.at, k)
			}
		}
		if len(h.at) >= maxHidden {
			// Forgetting only costs a forwarded pull (one manifest request).
			clear(h.at)
		}
	}
	h.at[hiddenKey(image)] = now
}

func (h *hiddenSet) recent(image string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.at[hiddenKey(image)]
	return ok && now.Sub(t) <= h.window
}
