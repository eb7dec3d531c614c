package credtracker

import "syscall"

// madvCollapse is MADV_COLLAPSE (Linux 6.1), not in package syscall.
const madvCollapse = 25

func madviseHuge(b []byte) error     { return syscall.Madvise(b, syscall.MADV_HUGEPAGE) }
func madviseCollapse(b []byte) error { return syscall.Madvise(b, madvCollapse) }
