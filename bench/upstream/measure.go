package main

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// chunk is how many requests run between two looks at the clock.
const chunk = 512

// loop runs count requests of a stream from index from and returns how
// many answers were not the expected one.
type loop func(s stream, from, count int) (bad int)

// cost is the time a measurement took per operation: on the wall clock,
// and in CPU time of the whole process (every thread, the garbage
// collector's included). Other processes' load stretches the first, not
// the second.
type cost struct{ wall, cpu float64 }

// perOp runs f over s from a random offset, first for d/10 of CPU time to
// warm up, then for at least d, and returns the cost per request. Any
// unexpected answer is an error: the path measured would not be the one
// the table names.
func perOp(f loop, s stream, rng *rand.Rand, d time.Duration) (cost, error) {
	from := rng.IntN(streamLen)
	ops, bad := 0, 0
	for start := cpuNow(); cpuNow()-start < d/10; ops += chunk {
		bad += f(s, from+ops, chunk)
	}
	from += ops
	ops = 0
	wall, cpu := time.Now(), cpuNow()
	for ; cpuNow()-cpu < d; ops += chunk {
		bad += f(s, from+ops, chunk)
	}
	c := cost{wall: float64(time.Since(wall).Nanoseconds()) / float64(ops), cpu: float64((cpuNow() - cpu).Nanoseconds()) / float64(ops)}
	if bad != 0 {
		return cost{}, fmt.Errorf("%d of %d answers were not the expected one", bad, ops)
	}
	return c, nil
}

// cpuNow is the CPU time the process has used so far.
func cpuNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_PROCESS_CPUTIME_ID): %v", err)) // Linux has it since 2.6.12
	}
	return time.Duration(ts.Nano())
}

// writesPer runs write(0), write(1), ... for at least d and at least
// minWrites times, and returns the wall-clock nanoseconds per write (a
// durable write waits for the device) and how many were made.
func writesPer(write func(k int) error, d time.Duration, minWrites int) (float64, int, error) {
	start := time.Now()
	k := 0
	for ; k < minWrites || time.Since(start) < d; k++ {
		if err := write(k); err != nil {
			return 0, k, fmt.Errorf("write %d: %w", k, err)
		}
	}
	return float64(time.Since(start).Nanoseconds()) / float64(k), k, nil
}

// timedOpen measures open and the heap it leaves behind (after a GC).
func timedOpen(open func() error) (elapsed cost, heap int64, err error) {
	var before, after runtime.MemStats
	// Two collections each time: the first moves sync.Pool caches to their
	// victim caches, the second frees them.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	wall, cpu := time.Now(), cpuNow()
	if err := open(); err != nil {
		return cost{}, 0, err
	}
	elapsed = cost{wall: float64(time.Since(wall).Nanoseconds()), cpu: float64((cpuNow() - cpu).Nanoseconds())}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return elapsed, int64(after.HeapAlloc) - int64(before.HeapAlloc), nil
}

// samples are one figure's values, one per round.
type samples []float64

func (s samples) median() float64 {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func (s samples) span() (lo, hi float64) {
	if len(s) == 0 {
		return 0, 0
	}
	return slices.Min(s), slices.Max(s)
}

// dirBlocks sums the space the files directly under dir take on disk.
func dirBlocks(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += fi.Size()
		}
		return nil
	})
	return total, err
}
