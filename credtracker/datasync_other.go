//go:build !linux

package credtracker

import "os"

// datasync flushes f's data: where fdatasync is not offered, fsync (on
// macOS, os.File.Sync is the full flush, F_FULLFSYNC).
func datasync(f *os.File) error { return f.Sync() }
