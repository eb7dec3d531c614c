//go:build !linux

package credtracker

import "time"

// threadCPU is not measured on this system.
func threadCPU() time.Duration { return 0 }
