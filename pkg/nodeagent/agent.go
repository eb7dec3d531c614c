package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// Defaults of an Agent.
const (
	// DefaultBinaryPath is where the agent puts the pullguard binary on
	// the node, DefaultServeKubeconfig serve's kubeconfig.
	DefaultBinaryPath      = "/opt/pullguard/bin/pullguard"
	DefaultServeKubeconfig = "/etc/pullguard/serve.kubeconfig"
	// DefaultTimeout bounds a restart and doctor's checks after it.
	DefaultTimeout = 5 * time.Minute
)

// Config is what the agent installs on its node.
type Config struct {
	// Root is where the host's / is mounted in the pod.
	Root string
	// Binary is the pullguard binary put on the node; nil puts none (the
	// node's package serves).
	Binary *nodeinstall.Binary
	// ServeArgs are serve's extra flags (--name=value).
	ServeArgs []string
	// ServeToken is the file of serve's ServiceAccount token in the pod
	// ("" for none: no serve kubeconfig). With one, serve's kubeconfig is
	// written at ServeKubeconfig (the node's path) and given to serve as
	// --authentication-kubeconfig and --authorization-kubeconfig.
	ServeToken      string
	ServeKubeconfig string
	// Timeout bounds a restart and doctor's checks after it
	// (DefaultTimeout when 0); the give-back has as long again.
	Timeout time.Duration
	// KubeletVersion is nodeinstall.Options' (tests).
	KubeletVersion func(binary string) (string, error)
}

// Agent installs pullguard on its node, or takes it off, and reports.
type Agent struct {
	Config Config
	// Systemd connects to the host's systemd (nodeinstall.DialSystemd).
	Systemd func(ctx context.Context, root string) (nodeinstall.Systemd, func(), error)
	// Doctor is doctor's checks of the node of a plan, nil once they pass.
	Doctor func(p *nodeinstall.Plan) func(context.Context) error
	Lease  *Lease
	Report *Reporter
	// Clock paces doctor's polls every Interval
	// (nodeinstall.DefaultPollInterval when 0).
	Clock    clock.Clock
	Interval time.Duration
}

func (a *Agent) timeout() time.Duration {
	if a.Config.Timeout > 0 {
		return a.Config.Timeout
	}
	return DefaultTimeout
}

// withTimeout is ctx ended after the agent's timeout on its Clock.
func (a *Agent) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	c := a.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := c.NewTimer(a.timeout())
	go func() {
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
			t.Stop()
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// LeaseDuration is how long the agent may hold the Lease without renewing
// it: its work under the Lease is three steps each bounded by the timeout
// (asking systemd when the kubelet and serve started; the restart and
// doctor; the give-back), and two minutes to spare for the writes, the
// API server's requests and the clocks of two nodes that differ.
func (c Config) LeaseDuration() time.Duration {
	t := c.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return 3*t + 2*time.Minute
}

// options are nodeinstall's options for the node, serve's kubeconfig
// among the files when the agent has a token.
func (a *Agent) options() (nodeinstall.Options, error) {
	c := a.Config
	o := nodeinstall.Options{Root: c.Root, KubeletVersion: c.KubeletVersion, Binary: c.Binary, ServeArgs: c.ServeArgs}
	if c.ServeToken == "" {
		return o, nil
	}
	kc := c.ServeKubeconfig
	if kc == "" {
		kc = DefaultServeKubeconfig
	}
	token, err := boundedread.ReadFile(c.ServeToken, maxTokenBytes)
	if err != nil {
		return o, fmt.Errorf("serve's token (%s): %w", c.ServeToken, err)
	}
	k, err := nodeinstall.Discover(c.Root)
	if err != nil {
		return o, err
	}
	data, err := ServeKubeconfig(c.Root, k, token)
	if err != nil {
		return o, err
	}
	o.Files = append(o.Files, nodeinstall.File{Path: kc, Data: data, Mode: 0o600, Why: "serve's kubeconfig: its ServiceAccount token, the kubelet's API server", Opaque: true})
	o.ServeArgs = append([]string{"--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc}, o.ServeArgs...)
	return o, nil
}

// restarter is a Restarter on the host's systemd with doctor's checks of p
// (none when p is nil).
func (a *Agent) restarter(sd nodeinstall.Systemd, p *nodeinstall.Plan) *nodeinstall.Restarter {
	r := &nodeinstall.Restarter{Systemd: sd, Clock: a.Clock, Interval: a.Interval}
	if p != nil && a.Doctor != nil {
		ready, last := a.Doctor(p), ""
		// Each new problem doctor finds while the agent waits is logged:
		// the wait lasts up to --timeout.
		r.Ready = func(ctx context.Context) error {
			err := ready(ctx)
			if err != nil && err.Error() != last {
				last = err.Error()
				klog.InfoS("waiting for doctor's checks to pass", "problem", leak.Redact(last, a.Report.Secrets...))
			}
			return err
		}
	}
	return r
}

// Install installs pullguard on the node, reports, and returns the
// status. It returns early, the node as it is, when ctx ends (the pod is
// stopped): then the status is not reported.
func (a *Agent) Install(ctx context.Context) Status { return a.finish(ctx, a.install(ctx)) }

// finish reports s, unless ctx ended: a stopped agent says nothing more.
func (a *Agent) finish(ctx context.Context, s Status) Status {
	s.Message = leak.Redact(s.Message, a.Report.Secrets...)
	if ctx.Err() != nil {
		klog.InfoS("node agent stopped: the node is left as it is", "reason", s.Reason, "message", s.Message)
		return s
	}
	_ = a.report(ctx, s)
	return s
}

// takeLease takes the Lease, reporting the wait, and returns its release,
// to be told whether the work failed.
func (a *Agent) takeLease(ctx context.Context) (func(failed bool), error) {
	if err := a.Lease.Acquire(ctx, func(holder string) {
		_ = a.report(ctx, Status{Reason: ReasonWaiting, Message: fmt.Sprintf("node %s is being switched (lease %s/%s): this node waits its turn", holder, a.Lease.Namespace, a.Lease.Name)})
	}); err != nil {
		return nil, err
	}
	return func(failed bool) {
		if err := a.Lease.Release(ctx, failed); err != nil {
			klog.ErrorS(err, "releasing the lease: the next node waits for it to expire")
		}
	}, nil
}

func (a *Agent) report(ctx context.Context, s Status) error {
	if err := a.Report.Report(ctx, s); err != nil {
		klog.ErrorS(err, "writing the agent's status")
		return err
	}
	return nil
}

func (a *Agent) install(ctx context.Context) Status {
	o, err := a.options()
	if err != nil {
		return Status{Reason: ReasonFailed, Message: err.Error()}
	}
	p, err := nodeinstall.PlanInstall(o)
	if err != nil {
		return planFailed(err)
	}
	if !p.Changed() {
		kubelet, serve, err := a.stale(ctx, o.Root, p)
		if err != nil {
			return Status{Reason: ReasonFailed, Message: err.Error()}
		}
		if kubelet || serve {
			return a.switchNode(ctx, o)
		}
		r := a.restarter(nil, p)
		wctx, cancel := a.withTimeout(ctx)
		defer cancel()
		if err := r.Wait(wctx); err != nil {
			return Status{Reason: ReasonDoctorFailed, Message: "nothing to change on the node, but " + err.Error()}
		}
		return Status{Ready: true, Reason: ReasonUpToDate, Message: "pullguard is installed on the node, nothing to change; doctor passes"}
	}
	return a.switchNode(ctx, o)
}

// stale says whether the kubelet or serve runs on settings older than
// the files install left (nodeinstall.Plan.Stale): an install whose
// restart never came, such as an agent stopped between its writes and
// the restart, or `pullguard install` run without --restart-kubelet.
func (a *Agent) stale(ctx context.Context, root string, p *nodeinstall.Plan) (kubelet, serve bool, err error) {
	rctx, cancel := a.withTimeout(ctx)
	defer cancel()
	sd, closeFn, err := a.Systemd(rctx, root)
	if err != nil {
		return false, false, fmt.Errorf("the host's systemd: %w", err)
	}
	defer closeFn()
	return p.Stale(rctx, sd)
}

// switchNode takes the Lease, plans again, writes what changed, and
// restarts the kubelet onto serve (or serve alone) when its files changed
// or it runs on older ones; then doctor, and the node given back when it
// fails.
func (a *Agent) switchNode(ctx context.Context, o nodeinstall.Options) (s Status) {
	// One node at a time.
	release, err := a.takeLease(ctx)
	if errors.Is(err, ErrHalted) {
		return Status{Reason: ReasonHalted, Message: err.Error()}
	}
	if err != nil {
		return Status{Reason: ReasonFailed, Message: err.Error()}
	}
	defer func() { release(workFailed(s)) }()
	// The node as it is now, after the wait.
	p, err := nodeinstall.PlanInstall(o)
	if err != nil {
		return planFailed(err)
	}
	// A kubelet whose files do not change may still run on older ones;
	// serve restarts anyway when its files change.
	kubelet, stale := p.KubeletChanged(), ""
	if !kubelet {
		k, s, err := a.stale(ctx, o.Root, p)
		switch {
		case err != nil:
			return Status{Reason: ReasonFailed, Message: err.Error()}
		case k:
			kubelet, stale = true, "the kubelet ran on its settings from before install's files: "
		case p.Changed():
		case s:
			stale = "serve ran on files older than install's: "
		default:
			return Status{Ready: true, Reason: ReasonUpToDate, Message: "pullguard is installed on the node, nothing to change"}
		}
	}
	for _, c := range p.Changes {
		if c.Action != nodeinstall.Unchanged {
			klog.InfoS("install", "action", c.Action, "path", c.Path)
		}
	}
	// An installed node keeps serve's records whatever happens: they
	// are what its tenants proved.
	installedBefore, err := nodeinstall.Installed(o)
	if err != nil {
		return Status{Reason: ReasonFailed, Message: err.Error()}
	}
	if p.Changed() {
		if _, err := nodeinstall.Install(o, p); err != nil {
			return Status{Reason: ReasonFailed, Message: "install: " + err.Error()}
		}
	}
	if ctx.Err() != nil {
		// Stopped between the writes and the restart: the next agent finds
		// the kubelet or serve on older files (Stale) and restarts them.
		return Status{Reason: ReasonStarting, Message: errStopped.Error()}
	}

	rctx, cancel := a.withTimeout(ctx)
	defer cancel()
	sd, closeFn, err := a.Systemd(rctx, o.Root)
	switch {
	case err != nil && ctx.Err() != nil:
		return Status{Reason: ReasonStarting, Message: errStopped.Error()}
	case err != nil && kubelet && !installedBefore:
		// Nothing restarted, nothing of pullguard ran: the files go back.
		return a.giveBack(ctx, nil, kubelet, false, fmt.Errorf("the host's systemd: %w", err))
	case err != nil:
		// The kubelet and serve run on the install that was there: the new
		// files stay, consistent with the manifest, and the next agent
		// restarts what runs on older ones.
		return Status{Reason: ReasonFailed, Message: fmt.Sprintf("the host's systemd: %v: the new files are written, nothing was restarted", err)}
	}
	defer closeFn()
	r := a.restarter(sd, p)
	if kubelet {
		err = r.Activate(rctx, p.Units)
	} else {
		err = r.RestartServe(rctx, p.Units)
	}
	if ctx.Err() != nil {
		return Status{Reason: ReasonStarting, Message: errStopped.Error()}
	}
	if err != nil {
		return a.giveBack(ctx, sd, kubelet, installedBefore || !kubelet, err)
	}
	if kubelet {
		return Status{Ready: true, Reason: ReasonInstalled, Message: fmt.Sprintf("%sinstalled; the kubelet restarted onto serve (%s); doctor passes", stale, p.ServeSocket)}
	}
	if stale != "" {
		return Status{Ready: true, Reason: ReasonServeUpdated, Message: stale + "serve restarted, the kubelet did not; doctor passes"}
	}
	return Status{Ready: true, Reason: ReasonServeUpdated, Message: "serve's files changed: serve restarted, the kubelet did not; doctor passes"}
}

// workFailed says whether s, the end of work under the Lease, counts
// against the rollout: not ready, other than stopped.
func workFailed(s Status) bool { return !s.Ready && s.Reason != ReasonStarting }

// planFailed is the status of a plan that failed: refused (nothing
// written) or not made.
func planFailed(err error) Status {
	if errors.Is(err, nodeinstall.ErrRefused) {
		return Status{Reason: ReasonRefused, Message: err.Error() + "; nothing was written"}
	}
	return Status{Reason: ReasonFailed, Message: err.Error()}
}

// giveBack puts the node back as it was before pullguard (uninstall, the
// kubelet restarted; without sd, when nothing was restarted, the files
// alone) after cause, and says why. Serve's records are kept when
// keepRecords (a node installed before this agent: they are what its
// tenants proved, and a later install starts from them).
func (a *Agent) giveBack(ctx context.Context, sd nodeinstall.Systemd, kubelet, keepRecords bool, cause error) Status {
	why := "rolled back: " + cause.Error()
	o := nodeinstall.Options{Root: a.Config.Root}
	u, err := nodeinstall.PlanUninstall(o, keepRecords)
	if err != nil {
		return Status{Reason: ReasonFailed, Message: fmt.Sprintf("%s; giving the node back failed: %v: run `pullguard uninstall --restart-kubelet` on the node", cause, err)}
	}
	if where, err := u.KubeletStillAsksServe(o); err != nil || where != "" {
		if err == nil {
			err = fmt.Errorf("%s: the kubelet's own configuration asks serve's socket: given back with serve stopped, it would have no image service", where)
		}
		return Status{Reason: ReasonFailed, Message: fmt.Sprintf("%s; the node was not given back: %v", cause, err)}
	}
	gctx, cancel := a.withTimeout(context.WithoutCancel(ctx))
	defer cancel()
	files := func() error { return nodeinstall.Uninstall(o, u) }
	if sd == nil {
		// Nothing was restarted: the files alone.
		err = files()
	} else {
		r := a.restarter(sd, nil)
		if errors.Is(cause, nodeinstall.ErrKubeletNotRestarted) {
			// The kubelet runs on its own settings: not restarted again.
			err = r.Withdraw(gctx, u.Manifest.Units, files)
		} else {
			err = r.Deactivate(gctx, u.Manifest.Units, files)
		}
	}
	if err != nil {
		return Status{Reason: ReasonFailed, Message: fmt.Sprintf("%s; giving the node back failed: %v: run `pullguard uninstall --restart-kubelet` on the node", cause, err)}
	}
	if u.Kept() {
		why += "; files changed since install were kept: see `pullguard uninstall --dry-run` on the node"
	}
	return Status{Reason: ReasonRolledBack, Message: why + "; the node runs as before pullguard"}
}

// Uninstall takes pullguard off the node, one node at a time, reports,
// and returns the status; it returns early when ctx ends.
func (a *Agent) Uninstall(ctx context.Context) Status { return a.finish(ctx, a.uninstall(ctx)) }

func (a *Agent) uninstall(ctx context.Context) (s Status) {
	o := nodeinstall.Options{Root: a.Config.Root}
	if _, err := nodeinstall.PlanUninstall(o, false); errors.Is(err, nodeinstall.ErrNotInstalled) {
		return Status{Ready: true, Reason: ReasonNotInstalled, Message: "pullguard is not installed on the node"}
	} else if err != nil {
		return Status{Reason: ReasonUninstallFailed, Message: err.Error()}
	}
	release, err := a.takeLease(ctx)
	if errors.Is(err, ErrHalted) {
		return Status{Reason: ReasonHalted, Message: err.Error()}
	}
	if err != nil {
		return Status{Reason: ReasonUninstallFailed, Message: err.Error()}
	}
	defer func() { release(workFailed(s)) }()
	u, err := nodeinstall.PlanUninstall(o, false)
	if errors.Is(err, nodeinstall.ErrNotInstalled) {
		return Status{Ready: true, Reason: ReasonNotInstalled, Message: "pullguard is not installed on the node"}
	}
	if err != nil {
		return Status{Reason: ReasonUninstallFailed, Message: err.Error()}
	}
	if where, err := u.KubeletStillAsksServe(o); err != nil {
		return Status{Reason: ReasonUninstallFailed, Message: err.Error()}
	} else if where != "" {
		return Status{Reason: ReasonUninstallFailed, Message: where + ": the kubelet's own configuration asks serve's socket (a bootstrap recipe's setting?): uninstalled, with serve stopped, the kubelet would have no image service; remove that setting there, then delete this pod; nothing was changed"}
	}
	// Once begun, a give-back is carried to its end (within the
	// timeout), a stop or not: half of one would leave the node's files
	// given back under a kubelet still asking serve, with no manifest left
	// for the next pod to finish it.
	rctx, cancel := a.withTimeout(context.WithoutCancel(ctx))
	defer cancel()
	sd, closeFn, err := a.Systemd(rctx, o.Root)
	if err != nil {
		return Status{Reason: ReasonUninstallFailed, Message: fmt.Sprintf("the host's systemd: %v", err)}
	}
	defer closeFn()
	files := func() error { return nodeinstall.Uninstall(o, u) }
	if err := a.restarter(sd, nil).Deactivate(rctx, u.Manifest.Units, files); err != nil {
		return Status{Reason: ReasonUninstallFailed, Message: err.Error()}
	}
	var kept []string
	for _, c := range u.Changes {
		if c.Action == nodeinstall.Kept {
			kept = append(kept, c.Path)
		}
	}
	if len(kept) > 0 {
		return Status{Ready: true, Reason: ReasonUninstalled, Message: fmt.Sprintf("uninstalled; the kubelet restarted on its own settings; kept, changed since install: %s", strings.Join(kept, ", "))}
	}
	return Status{Ready: true, Reason: ReasonUninstalled, Message: "uninstalled; the kubelet restarted on its own settings"}
}

// Start reports that the agent starts (not ready), so that the status of
// an earlier container is not read as this one's.
func (a *Agent) Start(ctx context.Context) error {
	return a.report(ctx, Status{Reason: ReasonStarting, Message: "the agent is at work on the node"})
}

// DefaultRecheckInterval is how often Watch runs doctor again.
const DefaultRecheckInterval = time.Minute

// Watch checks the node with doctor again every interval once the agent's
// work is done, until ctx ends (install mode): a node that was ready and
// no longer passes (serve down or crash-looping, a pass-through drop-in,
// install's files rewritten by hand) turns not ready, DoctorFailed with
// doctor's problem, and ready again once it passes; an Event at each
// change, none while nothing changes. It changes nothing on the node. A
// node the agent left not ready for another reason (refused, given back)
// is not watched: its pod must be deleted to try again.
func (a *Agent) Watch(ctx context.Context, every time.Duration, last Status) {
	if every <= 0 || a.Doctor == nil || (!last.Ready && last.Reason != ReasonDoctorFailed) {
		return
	}
	o, err := a.options()
	if err != nil {
		klog.ErrorS(err, "node agent: the node is not checked again")
		return
	}
	p, err := nodeinstall.PlanInstall(o)
	if err != nil {
		klog.ErrorS(err, "node agent: the node is not checked again")
		return
	}
	// Doctor needs the node's paths, not the files' bytes (the binary's
	// among them): they are not held for the life of the pod.
	for i := range p.Changes {
		p.Changes[i].Data, p.Changes[i].Old = nil, nil
	}
	c := a.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.After(every):
		}
		last = a.recheck(ctx, p, last)
	}
}

// recheck runs doctor once and reports when the node's readiness changed.
func (a *Agent) recheck(ctx context.Context, p *nodeinstall.Plan, last Status) Status {
	// Bounded in real time: the Clock paces only the checks.
	cctx, cancel := context.WithTimeout(ctx, a.timeout())
	err := a.Doctor(p)(cctx)
	cancel()
	if ctx.Err() != nil {
		return last
	}
	switch {
	case err != nil && last.Ready:
		return a.finish(ctx, Status{Reason: ReasonDoctorFailed, Message: "doctor no longer passes: " + err.Error()})
	case err == nil && !last.Ready:
		return a.finish(ctx, Status{Ready: true, Reason: ReasonUpToDate, Message: "doctor passes again"})
	}
	return last
}
