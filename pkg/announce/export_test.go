package announce

import "time"

// Test hooks, compiled only into this package's tests.

// Loads returns how many times the Board read its directory.
func (b *Board) Loads() int64 { return b.loads.Load() }

// WithFSNow sets the wall clock the directory's modification time is
// compared with (racyWindow), so that a test decides whether a reading
// counts as racy.
func WithFSNow(now func() time.Time) BoardOption { return func(b *Board) { b.fsNow = now } }

// WithOwners sets the uids trusted to own the directory and its files.
func WithOwners(uids ...uint32) BoardOption { return func(b *Board) { b.owners = uids } }
