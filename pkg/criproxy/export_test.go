package criproxy

import "time"

// WithClockStep makes New take step for the wall clock's finest step
// instead of measuring it.
func WithClockStep(step time.Duration) Option {
	return func(s *Server) { s.clockStep = func() time.Duration { return step } }
}
