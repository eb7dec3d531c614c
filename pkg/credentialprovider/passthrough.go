package credentialprovider

import (
	"context"
	"io"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

// Invocation is one run of a plugin on behalf of the program that asked
// for it (the kubelet, through `pullguard credential-provider`), which
// must get what the plugin gives as if it had run the plugin itself.
type Invocation struct {
	// Path is the plugin's executable; Args its arguments.
	Path string
	Args []string
	// Env is the plugin's whole environment ("NAME=value").
	Env []string
	// Stdin is the request, given to the plugin as it is.
	Stdin []byte
	// Stdout gets all of the plugin's stdout, as it comes (required).
	Stdout io.Writer
	// Timeout bounds the run (<= 0: DefaultTimeout), measured on Clock
	// (nil: the real clock).
	Timeout time.Duration
	Clock   clock.Clock
	// StdoutLimit and StderrLimit bound what Outcome keeps (<= 0:
	// DefaultStdoutLimit, DefaultStderrLimit). More output is not an
	// error: stdout still all reaches Stdout, stderr is cut.
	StdoutLimit, StderrLimit int
}

// Outcome is how a pass-through run ended.
type Outcome struct {
	// Stdout is the first StdoutLimit bytes of stdout; StdoutComplete is
	// false when more came (they reached Invocation.Stdout only).
	Stdout         []byte
	StdoutComplete bool
	// Stderr is the first StderrLimit bytes of stderr; StderrCut says
	// more came and was dropped.
	Stderr    []byte
	StderrCut bool
	// ExitCode is the plugin's exit status, or -1 when a signal (Signal)
	// killed it.
	ExitCode int
	Signal   syscall.Signal
}

// Succeeded reports whether the plugin exited with status 0 and its whole
// stdout was kept: the only outcome worth decoding.
func (o Outcome) Succeeded() bool { return o.ExitCode == 0 && o.Signal == 0 && o.StdoutComplete }

// Passthrough runs a plugin as its caller would have run it: inv.Stdin on
// its stdin, its stdout copied to inv.Stdout unchanged and in full, its
// exit status and (bounded) stderr returned. It runs under the same reaper
// as every plugin run of this package, so that no process the plugin
// starts outlives the run, nor the calling process if that is killed
// (the kubelet kills a plugin that takes over a minute).
//
// A plugin that exits non-zero or is killed by a signal is an Outcome,
// not an error: its caller mirrors it. The error is a *PluginError for a
// plugin that could not be started (ErrPluginStart), did not finish
// within the timeout (ErrPluginTimeout) or whose run ctx cancelled
// (ErrPluginCanceled); the plugin was then killed, and the Outcome holds
// what it wrote until then.
func Passthrough(ctx context.Context, inv Invocation) (Outcome, error) {
	timeout := inv.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	clk := inv.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	spec := runSpec{
		path: inv.Path, args: inv.Args, env: inv.Env, stdin: inv.Stdin,
		stdoutMax: inv.StdoutLimit, stderrMax: inv.StderrLimit,
		stdoutTo: inv.Stdout,
	}
	if spec.stdoutMax <= 0 {
		spec.stdoutMax = DefaultStdoutLimit
	}
	if spec.stderrMax <= 0 {
		spec.stderrMax = DefaultStderrLimit
	}
	if spec.stdoutTo == nil {
		spec.stdoutTo = io.Discard
	}
	ctx, cancel := withTimeout(ctx, clk, timeout)
	defer cancel()
	res, rf := run(ctx, spec)
	out := Outcome{
		Stdout: res.stdout, StdoutComplete: !res.stdoutCut,
		Stderr: res.stderr, StderrCut: res.stderrCut,
		ExitCode: res.exitCode, Signal: res.signal,
	}
	if rf == nil || rf.kind == KindExit {
		return out, nil
	}
	if rf.kind == KindTimeout {
		rf.detail = "did not finish within " + timeout.String() + " and was killed"
	}
	return out, &PluginError{Plugin: inv.Path, Kind: rf.kind, ExitCode: res.exitCode, Detail: rf.detail, Err: rf.err}
}
