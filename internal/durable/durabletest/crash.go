package durabletest

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/durable"
)

const (
	envTest  = "PULLGUARD_DURABLE_CRASH_TEST"
	envDir   = "PULLGUARD_DURABLE_CRASH_DIR"
	envAfter = "PULLGUARD_DURABLE_CRASH_AFTER"
	// killedLine starts the line a child prints before it is killed,
	// completedLine the one after its write returned.
	killedLine    = "durabletest: killed after "
	completedLine = "durabletest: completed after "
	// maxSteps bounds the runs of one Crash.
	maxSteps = 200
)

// CrashCase is what Crash runs.
type CrashCase struct {
	// Setup, if not nil, prepares dir in the test's process before each
	// run: the old file, if the write replaces one.
	Setup func(t *testing.T, dir string)
	// Write is the write under test, in the child process, with dir set up
	// by Setup. Only package durable's operations under dir count as
	// steps.
	Write func(dir string) error
	// Check says what dir must hold, in the test's process, after the
	// child was killed (Outcome.Killed) or after its write returned.
	Check func(t *testing.T, dir string, o Outcome)
}

// Outcome is how a run of the child ended.
type Outcome struct {
	// Killed says the child was killed; else its write returned nil.
	Killed bool
	// Steps is how many of package durable's operations had completed.
	Steps int
	// After is the last of them ("" for none).
	After string
}

func (o Outcome) String() string {
	if !o.Killed {
		return fmt.Sprintf("completed after %d steps", o.Steps)
	}
	return fmt.Sprintf("killed after step %d (%s)", o.Steps, o.After)
}

// Crash runs c.Write in a child process (this test binary, running only
// the calling test) killed with SIGKILL after its first n operations of
// package durable, for n = 0, 1, ... until a run completes, each in a new
// directory, and calls c.Check after each. A kill leaves the page cache
// as it was, so Crash shows atomicity, not durability: Record shows the
// fsyncs.
//
// In the child, Crash runs the write and exits; what the test does before
// Crash, the child does too.
func Crash(t *testing.T, c CrashCase) {
	t.Helper()
	if os.Getenv(envTest) != "" {
		if os.Getenv(envTest) == t.Name() {
			runChild(t, c)
		}
		return
	}
	for n := 0; n <= maxSteps; n++ {
		dir := t.TempDir()
		if c.Setup != nil {
			c.Setup(t, dir)
		}
		o := runParent(t, dir, n)
		c.Check(t, dir, o)
		if t.Failed() {
			t.Fatalf("after a run %s", o)
		}
		if !o.Killed {
			// Killed after each of its steps (the last run, after the
			// last), the write now ran them all.
			require.Equal(t, n-1, o.Steps, "the write took another number of steps than before")
			require.Positive(t, o.Steps, "the write made no step of package durable under its directory")
			return
		}
		require.Equal(t, n, o.Steps, "the child was killed after another step than asked")
	}
	t.Fatalf("the write did not complete within %d steps", maxSteps)
}

// runName is the -test.run pattern that selects exactly the test name.
func runName(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func runParent(t *testing.T, dir string, n int) Outcome {
	cmd := exec.Command(os.Args[0], "-test.run="+runName(t.Name()), "-test.count=1")
	cmd.Env = append(os.Environ(), envTest+"="+t.Name(), envDir+"="+dir, envAfter+"="+strconv.Itoa(n))
	out, err := cmd.CombinedOutput()
	if err == nil {
		steps, _ := lastLine(t, out, completedLine)
		return Outcome{Steps: steps}
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "running the child: %s", out)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child failed (%v), not killed: %s", err, out)
	steps, after := lastLine(t, out, killedLine)
	return Outcome{Killed: true, Steps: steps, After: after}
}

// lastLine reads the child's last line that starts with prefix: the
// number of steps, and what follows it.
func lastLine(t *testing.T, out []byte, prefix string) (int, string) {
	i := strings.LastIndex(string(out), prefix)
	require.GreaterOrEqual(t, i, 0, "the child printed no %q: %s", prefix, out)
	line, _, _ := strings.Cut(string(out[i+len(prefix):]), "\n")
	num, rest, _ := strings.Cut(line, " ")
	n, err := strconv.Atoi(num)
	require.NoError(t, err, "child output: %s", out)
	return n, rest
}

func runChild(t *testing.T, c CrashCase) {
	dir := os.Getenv(envDir)
	after, err := strconv.Atoi(os.Getenv(envAfter))
	require.NoError(t, err)
	var mu sync.Mutex // a write may run operations on several goroutines
	steps := 0
	kill := func(what string) {
		// Written straight to the file descriptor: nothing is buffered
		// when the kill comes.
		fmt.Fprintf(os.Stdout, "%s%d %s\n", killedLine, steps, what)
		if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
			t.Fatalf("failed to kill the child: %v", err)
		}
		select {} // not reached: SIGKILL ends the process
	}
	if after == 0 {
		kill("nothing")
	}
	t.Cleanup(durable.SetFS(&interposer{root: dir, see: func(op Op) {
		mu.Lock()
		defer mu.Unlock()
		steps++
		if steps == after {
			kill(op.String())
		}
	}}))
	require.NoError(t, c.Write(dir), "the write failed")
	mu.Lock()
	fmt.Fprintf(os.Stdout, "%s%d steps\n", completedLine, steps)
	// What the calling test does after Crash is the parent's.
	os.Exit(0)
}
