package credtracker

import (
	"os"
	"syscall"
)

// datasync flushes f's data (fdatasync, as bbolt syncs on Linux).
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
