package credentialprovider

// Test hooks, compiled only into this package's tests.

import (
	"slices"

	"k8s.io/utils/clock"
)

// WithSweepHook calls hook after every janitor sweep with the number of
// entries it removed.
func WithSweepHook(hook func(removed int)) Option {
	return func(o *options) error {
		o.sweepHook = hook
		return nil
	}
}

// CacheSize returns how many cache entries and remembered failures the
// named provider holds.
func (m *Manager) CacheSize(provider string) (entries, failures int) {
	for _, p := range m.plugins {
		if p.cfg.Name == provider {
			return p.cache.size()
		}
	}
	return -1, -1
}

// WithTimeoutClock measures plugin timeouts on c instead of real time, so
// a test fires a timeout when the plugin is ready for it, not when a
// loaded machine happens to get there.
func WithTimeoutClock(c clock.Clock) Option {
	return func(o *options) error {
		o.timeoutClock = c
		return nil
	}
}

// Callers returns, for each run of the named provider in flight, how many
// look-ups wait for it, in increasing order.
func (m *Manager) Callers(provider string) []int {
	var out []int
	for _, p := range m.plugins {
		if p.cfg.Name != provider {
			continue
		}
		p.flightMu.Lock()
		for _, f := range p.flights {
			out = append(out, f.refs)
		}
		p.flightMu.Unlock()
	}
	slices.Sort(out)
	return out
}

// PluginEnv is the environment a plugin is started with, from the
// inherited variables and the configured ones.
var PluginEnv = pluginEnv
