package criproxy

import "time"

// WithClockStep makes New take step for the wall clock's finest step
// instead of measuring it.
func WithClockStep(step time.Duration) Option {
	return func(s *Server) { s.clockStep = func() time.Duration { return step } }
}

// WithMaxWindows bounds the answer windows (and the other maps of
// podCalls: the proofs by 2n) by n instead of maxWindows.
func WithMaxWindows(n int) Option {
	return func(s *Server) { s.maxWindows = n }
}

// OpenWindows is the number of answer windows s keeps.
func OpenWindows(s *Server) int {
	s.calls.mu.Lock()
	defer s.calls.mu.Unlock()
	return s.calls.open.len()
}

// CheckSilence runs one of w's periodic checks now.
func CheckSilence(w *CallWatch) { w.check() }
