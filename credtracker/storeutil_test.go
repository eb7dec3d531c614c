package credtracker

import (
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pullguard/pullguard/pkg/credential"
)

// newBenchStore creates a new store under dir for h, with fsync off (the
// caller sets s.db.NoSync too), as a tracker would.
func newBenchStore(dir string, h *credential.Hasher) (*store, error) {
	sl := newSealer(h)
	gen, err := openGenFile(filepath.Join(dir, GenerationFile), sl, true)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, StoreFile)
	if err := createStore(path, sl, gen, nil, true); err != nil {
		gen.close()
		return nil, err
	}
	s, err := openStore(path, sl, gen, false, nil)
	if err != nil {
		gen.close()
		return nil, err
	}
	s.db.NoSync = true
	return s, nil
}

// openBoltForBench opens the store under dir with bbolt alone, read-only,
// to measure its size.
func openBoltForBench(dir string) (*store, error) {
	db, err := bolt.Open(filepath.Join(dir, StoreFile), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	return &store{db: db, gen: &genFile{}}, nil
}

// cpuTime is the CPU time the process has used, in user and system mode.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPU is the CPU time the calling OS thread has used; callers lock
// their goroutine to its thread. On a shared machine it is steadier than
// wall time: time spent waiting for a core does not count, time stalled
// on memory does.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
