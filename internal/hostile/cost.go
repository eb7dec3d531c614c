package hostile

import (
	"fmt"
	"runtime"
	"time"
)

// Cost is what a call cost the process that made it, while a registry
// attacked it.
type Cost struct {
	// Elapsed is the call's duration.
	Elapsed time.Duration
	// Allocated is the bytes the process allocated during the call: the
	// registry's own answers (in the same process) included, so an upper
	// bound of the client's.
	Allocated int64
	// Kept is what the heap grew by over the call, once collected.
	Kept int64
	// Goroutines is their number before the call, GoroutinesAfter once
	// its connections closed.
	Goroutines, GoroutinesAfter int
}

func (c Cost) String() string {
	return fmt.Sprintf("%v, allocated %.1f MiB, kept %+.2f MiB, goroutines %d -> %d", c.Elapsed.Round(time.Millisecond),
		float64(c.Allocated)/(1<<20), float64(c.Kept)/(1<<20), c.Goroutines, c.GoroutinesAfter)
}

// Measure runs call and returns what it cost. The goroutines are counted
// once their number settled, and again after release, which closes what
// the client keeps idle (its idle connections): that count waits, at
// most 5 seconds, for them to come back to their number, as connections
// close asynchronously.
func Measure(call, release func()) Cost {
	c := Cost{Goroutines: settledGoroutines()}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	call()
	c.Elapsed = time.Since(start)
	runtime.ReadMemStats(&after)
	c.Allocated = int64(after.TotalAlloc - before.TotalAlloc)
	runtime.GC()
	runtime.ReadMemStats(&after)
	c.Kept = int64(after.HeapAlloc) - int64(before.HeapAlloc)
	release()
	c.GoroutinesAfter = waitGoroutines(c.Goroutines)
	return c
}

// settledGoroutines returns the number of goroutines once it held for 5
// ticks of 10 ms (at most 5 seconds).
func settledGoroutines() int {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	end := time.After(5 * time.Second)
	n, same := runtime.NumGoroutine(), 0
	for same < 5 {
		select {
		case <-tick.C:
		case <-end:
			return n
		}
		if got := runtime.NumGoroutine(); got == n {
			same++
		} else {
			n, same = got, 0
		}
	}
	return n
}

// waitGoroutines waits, at most 5 seconds, until at most n goroutines
// run, and returns how many run.
func waitGoroutines(n int) int {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	end := time.After(5 * time.Second)
	for {
		got := runtime.NumGoroutine()
		if got <= n {
			return got
		}
		select {
		case <-tick.C:
		case <-end:
			return got
		}
	}
}
