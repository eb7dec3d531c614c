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
	p, fail := startPlugin(spec)
	if fail != nil {
		return runResult{}, fail
	}
	go p.writeStdin(spec.stdin)
	p.readOutputs(spec)
	waitErr, ctxEnded := p.wait(ctx)
	p.awaitOutputs()
	return runOutcome(ctx, spec, p.result(waitErr), waitErr, ctxEnded, p.overflowed())
}

// process is one started run: the reaper, which leads the plugin's process
// group, and the parent's ends of the plugin's pipes.
type process struct {
	cmd  *exec.Cmd
	pgid int
	// stdin is the write end of the plugin's stdin; stdout and stderr are
	// the read ends of its outputs, read into out and errOut by readers.
	stdin, stdout, stderr *os.File
	out, errOut           limitedBuffer
	readers               sync.WaitGroup
	// overflow receives the name of each output ("stdout", "stderr") that
	// went over its limit.
	overflow chan string
	stopOnce sync.Once
	reaped   chan struct{} // closed once the reaper is reaped
}

// startPlugin creates the plugin's pipes and starts spec.path under a
// reaper, in a process group of its own. On failure nothing is left open
// and the failure's kind is KindStart.
func startPlugin(spec runSpec) (*process, *runFailure) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, &runFailure{kind: KindStart, detail: "cannot create pipes", err: err}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, &runFailure{kind: KindStart, detail: "cannot create pipes", err: err}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, &runFailure{kind: KindStart, detail: "cannot create pipes", err: err}
	}

	cmd, env := reaper.Command(spec.path, spec.args, spec.env)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		return nil, &runFailure{kind: KindStart, detail: "cannot start", err: sanitizeStartError(err)}
	}
	// The child holds its own copies; the parent keeps only its ends.
	closeAll(inR, outW, errW)
	return &process{
		cmd:      cmd,
		pgid:     cmd.Process.Pid,
		stdin:    inW,
		stdout:   outR,
		stderr:   errR,
		overflow: make(chan string, 2),
		reaped:   make(chan struct{}),
	}, nil
}

// stop tells the reaper to stop, once: it kills the plugin and everything
// below it, then exits; a reaper still there after reaperStopGrace is
// killed with its process group. Once the reaper is reaped (an output
// overflowing while the pipes drain), stop does nothing: its pid may name
// another process by now.
func (p *process) stop() {
	p.stopOnce.Do(func() {
		select {
		case <-p.reaped:
			return
		default:
		}
		reaper.Stop(p.pgid)
		go func() {
			t := time.NewTimer(reaperStopGrace)
			defer t.Stop()
			select {
			case <-t.C:
				_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			case <-p.reaped:
			}
		}()
	})
}

// writeStdin writes the request to the plugin and closes its stdin. The
// request is small; a plugin that never reads stdin only makes this write
// fail or block until awaitOutputs closes the pipe.
func (p *process) writeStdin(request []byte) {
	_, _ = p.stdin.Write(request)
	_ = p.stdin.Close()
}

// readOutputs starts a reader for each of stdout and stderr, each kept up
// to its limit in spec. An output over its limit is named on p.overflow
// and stops the plugin; a pass-through (spec.stdoutTo) only cuts its
// outputs.
func (p *process) readOutputs(spec runSpec) {
	p.out.max, p.errOut.max = spec.stdoutMax, spec.stderrMax
	p.out.tee = spec.stdoutTo
	onOverflow := func(which string) func() {
		if spec.stdoutTo != nil {
			return func() {} // a pass-through only cuts
		}
		return func() { p.overflow <- which; p.stop() }
	}
	p.readers.Add(2)
	go drain(&p.readers, p.stdout, &p.out, onOverflow("stdout"))
	go drain(&p.readers, p.stderr, &p.errOut, onOverflow("stderr"))
}

// wait waits for the reaper to exit, stopping it first if ctx ends
// (ctxEnded). When it returns, the reaper has exited, and with it every
// process below it; its pid may be reused from then on, so nothing is
// signalled any more.
func (p *process) wait(ctx context.Context) (waitErr error, ctxEnded bool) {
	waited := make(chan error, 1)
	go func() { waited <- p.cmd.Wait() }()
	select {
	case waitErr = <-waited:
	case <-ctx.Done():
		ctxEnded = true
		p.stop()
		waitErr = <-waited
	}
	close(p.reaped)
	return waitErr, ctxEnded
}

// awaitOutputs lets the readers reach end of file, for at most
// pipeDrainGrace: only a descendant that left the process group (setsid)
// and kept the pipes open can hold them longer, and then they are closed.
// It closes stdin too.
func (p *process) awaitOutputs() {
	drained := make(chan struct{})
	go func() { p.readers.Wait(); close(drained) }()
	timer := time.NewTimer(pipeDrainGrace)
	select {
	case <-drained:
		timer.Stop()
	case <-timer.C:
		closeAll(p.stdout, p.stderr)
		<-drained
	}
	_ = p.stdin.Close()
}

// result is what the finished run left: the outputs kept, and the exit
// code and signal of waitErr, the reaper's wait.
func (p *process) result(waitErr error) runResult {
	res := runResult{
		stdout: p.out.buf, stderr: p.errOut.buf,
		stdoutCut: p.out.over, stderrCut: p.errOut.over,
	}
	if ee := (*exec.ExitError)(nil); errors.As(waitErr, &ee) {
		res.exitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.signal = ws.Signal()
		}
	}
	return res
}

// overflowed names the first output that went over its limit, or "".
func (p *process) overflowed() string {
	select {
	case which := <-p.overflow:
		return which
	default:
		return ""
	}
}

// runOutcome classifies a finished run, first match wins: an output over
// its limit (overflowed names it), ctx's end (ctxEnded: the timeout, else
// a cancellation), a reaper that could not start the plugin (its stderr,
// the reason, is moved into the failure), an exit that is not a success.
// A nil failure is a success.
func runOutcome(ctx context.Context, spec runSpec, res runResult, waitErr error, ctxEnded bool, overflowed string) (runResult, *runFailure) {
	if overflowed != "" {
		limit := spec.stdoutMax
		if overflowed == "stderr" {
			limit = spec.stderrMax
		}
		return res, &runFailure{kind: KindOutputTooLarge, detail: fmt.Sprintf("wrote more than %d bytes to %s and was killed", limit, overflowed)}
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
