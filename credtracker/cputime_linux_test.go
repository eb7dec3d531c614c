package credtracker

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time the calling OS thread has used; callers
// lock their goroutine to its thread. On a shared machine it is steadier
// than wall time: time spent waiting for a core does not count, time
// stalled on memory does.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
