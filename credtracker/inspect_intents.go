package credtracker

import (
	"slices"
	"strings"
	"time"
)

// PendingIntent is a pull intent the store holds: a pull that started and
// was not resolved (in flight, or interrupted by a crash).
type PendingIntent struct {
	// Image is the normalized image the pull was for.
	Image string
	// Since is when the pull started; zero for an intent written before
	// pullguard recorded the time.
	Since time.Time
}

// ReadIntents returns the pull intents the store under dir holds, sorted
// by image, without changing anything (`pullguard records`). An intent
// left by a crash makes its image need verification under every name at
// the next start. A missing store has none.
func ReadIntents(dir string) ([]PendingIntent, error) {
	c, found, err := inspectStore(dir)
	if err != nil || !found {
		return nil, wrapInspect("pull intents", dir, err)
	}
	out := make([]PendingIntent, 0, len(c.intents))
	for image := range c.intents {
		out = append(out, PendingIntent{Image: image, Since: c.intentSince[image]})
	}
	slices.SortFunc(out, func(a, b PendingIntent) int { return strings.Compare(a.Image, b.Image) })
	return out, nil
}
