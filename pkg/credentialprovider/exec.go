package credentialprovider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/internal/reaper"
)

// pipeDrainGrace bounds how long a run waits, once the plugin's process
// group is gone, for its output pipes to close. Only a descendant that left
// the group (setsid) and kept the pipes open can make it expire.
const pipeDrainGrace = 2 * time.Second

// reaperStopGrace bounds how long a run waits for a reaper told to stop
// before it kills the reaper itself.
const reaperStopGrace = 5 * time.Second

// runSpec is one plugin execution.
type runSpec struct {
	path  string
	args  []string
	env   []string
	stdin []byte
	// limits on what is kept of stdout and stderr; more is an error.
	stdoutMax, stderrMax int
	// stdoutTo, when set, makes the run a pass-through: it gets a copy of
	// all of stdout as it comes, and an output over its limit is cut
	// (what is kept stops growing) instead of killing the plugin.
	stdoutTo io.Writer
}

// runResult is what came back from a run that could be started. stderr is
// kept (up to its limit) even when the run failed, for the log.
type runResult struct {
	stdout   []byte
	stderr   []byte
	exitCode int // -1 when killed by a signal
	// signal is the signal that killed the plugin, or 0.
	signal syscall.Signal
	// stdoutCut and stderrCut: a pass-through kept only the first
	// stdoutMax or stderrMax bytes.
	stdoutCut, stderrCut bool
}

// runFailure classifies why a started run failed.
type runFailure struct {
	kind   ErrorKind
	detail string
	err    error
}

// run starts spec.path under a reaper (package internal/reaper), writes
// spec.stdin to it, and collects stdout and stderr up to their limits. When
// ctx ends (the timeout or a cancellation) or an output overflows, the
// reaper is told to stop. Either way the reaper kills every process left
// below it, those that called setsid included, before it exits, so no
// straggler outlives a run.
func run(ctx context.Context, spec runSpec) (runResult, *runFailure) {
	var res runResult
	inR, inW, err := os.Pipe()
	if err != nil {
		return res, &runFailure{kind: KindStart, detail: "cannot create pipes", err: err}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return res, &runFailure{kind: KindStart, detail: "cannot create pipes", err: err}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return res, &runFailure{kind: KindStart, detail: "cannot create pipes", err: err}
	}

	cmd, env := reaper.Command(spec.path, spec.args, spec.env)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		return res, &runFailure{kind: KindStart, detail: "cannot start", err: sanitizeStartError(err)}
	}
	// The child holds its own copies; the parent keeps only its ends.
	closeAll(inR, outW, errW)
	pgid := cmd.Process.Pid

	var (
		killOnce sync.Once
		overflow = make(chan string, 2)
	)
	reaperDone := make(chan struct{}) // closed once the reaper is reaped
	kill := func() {
		killOnce.Do(func() {
			select {
			case <-reaperDone:
				// Reaped (an output overflowing while the pipes drain):
				// its pid may name another process by now.
				return
			default:
			}
			// The reaper kills the plugin and everything below it, then
			// exits; SIGKILL is for a reaper that does not.
			reaper.Stop(pgid)
			go func() {
				t := time.NewTimer(reaperStopGrace)
				defer t.Stop()
				select {
				case <-t.C:
					_ = syscall.Kill(-pgid, syscall.SIGKILL)
				case <-reaperDone:
				}
			}()
		})
	}

	go func() {
		// The request is small; a plugin that never reads stdin only makes
		// this write fail or block until the pipe is closed below.
		_, _ = inW.Write(spec.stdin)
		_ = inW.Close()
	}()

	var readers sync.WaitGroup
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = spec.stdoutMax, spec.stderrMax
	stdout.tee = spec.stdoutTo
	onOverflow := func(which string) func() {
		if spec.stdoutTo != nil {
			return func() {} // a pass-through only cuts
		}
		return func() { overflow <- which; kill() }
	}
	readers.Add(2)
	go drain(&readers, outR, &stdout, onOverflow("stdout"))
	go drain(&readers, errR, &stderr, onOverflow("stderr"))

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var waitErr error
	ctxEnded := false
	select {
	case waitErr = <-waited:
	case <-ctx.Done():
		ctxEnded = true
		kill()
		waitErr = <-waited
	}
	// The reaper has exited, and with it every process below it (its pid
	// may be reused from now on: nothing is signalled any more). Let the
	// readers reach end of file.
	close(reaperDone)
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	timer := time.NewTimer(pipeDrainGrace)
	select {
	case <-drained:
		timer.Stop()
	case <-timer.C:
		closeAll(outR, errR)
		<-drained
	}
	_ = inW.Close()

	res.stdout, res.stderr = stdout.buf, stderr.buf
	res.stdoutCut, res.stderrCut = stdout.over, stderr.over
	if ee := (*exec.ExitError)(nil); errors.As(waitErr, &ee) {
		res.exitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.signal = ws.Signal()
		}
	}

	select {
	case which := <-overflow:
		limit := spec.stdoutMax
		if which == "stderr" {
			limit = spec.stderrMax
		}
		return res, &runFailure{kind: KindOutputTooLarge, detail: fmt.Sprintf("wrote more than %d bytes to %s and was killed", limit, which)}
	default:
	}
	if ctxEnded {
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return res, &runFailure{kind: KindTimeout, detail: "did not finish in time and was killed", err: context.DeadlineExceeded}
		}
		return res, &runFailure{kind: KindCanceled, detail: "run canceled and plugin killed", err: context.Cause(ctx)}
	}
	if res.exitCode == reaper.ExitStart && bytes.HasPrefix(res.stderr, []byte(reaper.StartFailure)) {
		cause := strings.TrimSpace(strings.TrimPrefix(string(res.stderr), reaper.StartFailure))
		res.stderr = nil
		return res, &runFailure{kind: KindStart, detail: "cannot start", err: errors.New(cause)}
	}
	if waitErr != nil {
		if res.exitCode == -1 {
			return res, &runFailure{kind: KindExit, detail: "killed by a signal", err: waitErr}
		}
		if res.exitCode > 0 {
			return res, &runFailure{kind: KindExit, detail: fmt.Sprintf("exited with status %d", res.exitCode)}
		}
		return res, &runFailure{kind: KindExit, detail: "wait failed", err: waitErr}
	}
	return res, nil
}

// withTimeout is context.WithTimeout measured on c: the returned context
// ends when d has passed on c, with context.DeadlineExceeded as its cause
// (ctx.Err() is then context.Canceled; run reads the cause).
func withTimeout(ctx context.Context, c clock.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	timer := c.NewTimer(d)
	go func() {
		defer timer.Stop()
		select {
		case <-timer.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// limitedBuffer keeps up to max bytes; over says more came. tee, when
// set, gets a copy of everything (its errors are ignored: a reader that
// went away must not stall the plugin).
type limitedBuffer struct {
	buf  []byte
	max  int
	over bool
	tee  io.Writer
}

// drain copies r into b until end of file. Past b.max it calls onOverflow
// once and keeps discarding, so the writer never blocks on a full pipe.
func drain(wg *sync.WaitGroup, r *os.File, b *limitedBuffer, onOverflow func()) {
	defer wg.Done()
	defer r.Close()
	chunk := make([]byte, 32*1024)
	for {
		n, err := r.Read(chunk)
		if n > 0 && b.tee != nil {
			if _, werr := b.tee.Write(chunk[:n]); werr != nil {
				b.tee = nil
			}
		}
		if n > 0 && !b.over {
			if len(b.buf)+n > b.max {
				// A pass-through keeps what fits, up to the limit.
				b.buf = append(b.buf, chunk[:b.max-len(b.buf)]...)
				b.over = true
				onOverflow()
			} else {
				b.buf = append(b.buf, chunk[:n]...)
			}
		}
		if err != nil {
			// io.EOF once every writer is gone, os.ErrClosed after the
			// drain grace; either way the run is over.
			return
		}
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// sanitizeStartError keeps the cause of a failed start (not found,
// permission denied, exec format error) without anything else.
func sanitizeStartError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
