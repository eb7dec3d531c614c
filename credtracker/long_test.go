package credtracker

import (
	"os"
	"testing"
	"time"
)

// longEnv, when set (make sweep sets it), runs this package's randomized
// tests at full length. By default they run a share of it, which keeps the
// package's suite within a third of go test's timeout under -race on a
// busy 2-core machine (docs/testing.md).
const longEnv = "CREDTRACKER_LONG"

// scaled is full when the tests run at full length, else short.
func scaled(short, full int) int {
	if os.Getenv(longEnv) != "" {
		return full
	}
	return short
}

// Scaled is scaled, for this package's black-box tests.
var Scaled = scaled

// ShortenLockTimeout makes a start wait d, not two seconds, for a store
// another process holds, until t ends; for the tests that hold it on
// purpose (the lock is held throughout: no margin is asserted).
func ShortenLockTimeout(t testing.TB, d time.Duration) {
	old := lockTimeout
	lockTimeout = d
	t.Cleanup(func() { lockTimeout = old })
}
