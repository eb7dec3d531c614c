package credtracker

import "slices"

// ReadIntents returns the images of the pull intents the store under dir
// holds, sorted, without changing anything (`pullguard records`). An intent
// left by a crash makes its image need verification under every name at
// the next start; intents carry no time. A missing store has none.
func ReadIntents(dir string) ([]string, error) {
	c, found, err := inspectStore(dir)
	if err != nil || !found {
		return nil, wrapInspect("pull intents", dir, err)
	}
	out := make([]string, 0, len(c.intents))
	for image := range c.intents {
		out = append(out, image)
	}
	slices.Sort(out)
	return out, nil
}
