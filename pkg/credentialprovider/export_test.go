package credentialprovider

// Test hooks, compiled only into this package's tests.

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
