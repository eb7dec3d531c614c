package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// dialSystemd and nodeReady are the host's systemd and doctor's checks;
// tests put fakes in their place.
var (
	dialSystemd   = nodeinstall.DialSystemd
	nodeReady     = doctorReady
	readyInterval = nodeinstall.DefaultPollInterval
)

type installOptions struct {
	hostRoot       string
	dryRun         bool
	restartKubelet bool
	keepRecords    bool
	serveArgs      []string
	timeout        time.Duration
	// systemd dials the host's systemd; tests give a fake.
	systemd func(ctx context.Context, root string) (nodeinstall.Systemd, func(), error)
	// ready says whether the node passes doctor; tests give a fake.
	ready func(p *nodeinstall.Plan) func(context.Context) error
}

func (o *installOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.hostRoot, "host-root", "/", "the node's root file system: every file read or written is under it (from a container: where the host's / is mounted)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print each file that would change, and how, and write nothing")
	f.BoolVar(&o.restartKubelet, "restart-kubelet", false, "then reload systemd and restart the kubelet through the host's systemd (D-Bus)")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "with --restart-kubelet, how long the restart and the node's checks may take")
}

func newInstallCommand() *cobra.Command {
	o := &installOptions{systemd: dialSystemd, ready: nodeReady}
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Set a node up for pullguard serve: its units, and the kubelet's image service pointed at serve",
		Long: `install finds the kubelet as systemd starts it (kubelet.service, its drop-ins,
kubeadm-flags.env, /etc/default/kubelet or /etc/sysconfig/kubelet) and writes:

  - pullguard's units and the kubelet's drop-in (the kubelet starts after serve)
    in /etc/systemd/system, unless the package put them in /usr/lib/systemd/system;
  - a drop-in of pullguard.service that gives serve the kubelet's --config, root
    directory, credential-provider flags and runtime socket;
  - the kubelet settings serve needs (imageServiceEndpoint, registryPullQPS,
    serializeImagePulls, maxParallelImagePulls): a file in the kubelet's
    --config-dir; on a kubelet 1.31 or later without one, a --config-dir added
    to KUBELET_EXTRA_ARGS and that file (kubeadm upgrade rewrites the kubelet's
    config.yaml, never those); otherwise merged into its configuration file,
    every other line kept.

Each file is replaced atomically, after a copy of the original is kept under
serve's store with a manifest, so that uninstall gives it back. A kubelet
configuration that does not parse, or whose image service is already another
socket, is refused with the file and line, and nothing is written. A second
install changes nothing.`,
		Example: `  sudo pullguard install --dry-run
  sudo pullguard install --restart-kubelet
  pullguard install --host-root /host --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.install(cmd.Context(), cmd.OutOrStdout()) },
	}
	o.addFlags(cmd)
	cmd.Flags().StringArrayVar(&o.serveArgs, "serve-arg", nil, "a flag of serve (--name=value) set on its command line in its drop-in, over the unit's; repeat for more (uninstall removes the drop-in)")
	return cmd
}

func newUninstallCommand() *cobra.Command {
	o := &installOptions{systemd: dialSystemd}
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Give a node back as it was before pullguard install",
		Long: `uninstall gives back every file install changed, byte for byte (the kubelet's
configuration or flags file), removes every file install created (units,
drop-ins) and the directories it created when they are empty, and removes
serve's store (its records) unless --keep-records. A file that changed after
install is left as it is, and said so, with the path of its original.

With --restart-kubelet it disables pullguard's units, reloads systemd, restarts
the kubelet (back on its runtime) and stops serve; without it, do that before
the next pod starts: systemctl daemon-reload && systemctl restart kubelet &&
systemctl stop pullguard.socket pullguard.service.`,
		Example: `  sudo pullguard uninstall --restart-kubelet
  sudo pullguard uninstall --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.uninstall(cmd.Context(), cmd.OutOrStdout()) },
	}
	o.addFlags(cmd)
	cmd.Flags().BoolVar(&o.keepRecords, "keep-records", false, "keep serve's store (its credential records) for a later install")
	return cmd
}

func (o *installOptions) nodeOptions() nodeinstall.Options {
	return nodeinstall.Options{Root: o.hostRoot, ServeArgs: o.serveArgs}
}

// checkServeArgs refuses flags serve would refuse at start: a drop-in
// with them would leave serve failing, the kubelet's files pointing at it.
func checkServeArgs(args []string) error {
	if len(args) == 0 {
		return nil
	}
	if err := newServeCommand().ParseFlags(args); err != nil {
		return fmt.Errorf("--serve-arg: serve refuses it: %w", err)
	}
	return nil
}

func (o *installOptions) install(ctx context.Context, out io.Writer) error {
	if err := checkServeArgs(o.serveArgs); err != nil {
		return err
	}
	p, err := nodeinstall.PlanInstall(o.nodeOptions())
	if err != nil {
		return err
	}
	for _, n := range p.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	if o.dryRun {
		fmt.Fprintln(out, "pullguard install --dry-run: nothing is written")
	}
	nodeinstall.Print(out, p.Changes)
	switch {
	case o.dryRun:
		return nil
	case !p.Changed():
		fmt.Fprintln(out, "pullguard is installed: nothing to change")
	default:
		if _, err := nodeinstall.Install(o.nodeOptions(), p); err != nil {
			return err
		}
		fmt.Fprintf(out, "installed; `pullguard uninstall` gives the node back (manifest under %s)\n", p.Store)
	}
	if !o.restartKubelet {
		fmt.Fprintf(out, "next: systemctl daemon-reload && systemctl enable --now %s && systemctl restart kubelet (or run install again with --restart-kubelet)\n", strings.Join(p.Units, " "))
		return nil
	}
	var ready func(context.Context) error
	if o.ready != nil {
		ready = o.ready(p)
	}
	if err := o.withSystemd(ctx, ready, func(ctx context.Context, r *nodeinstall.Restarter) error {
		return r.Activate(ctx, p.Units)
	}); err != nil {
		if errors.Is(err, nodeinstall.ErrKubeletNotRestarted) {
			// Its files point at serve now: its next restart, whatever
			// causes it, finds a serve that did not start.
			return fmt.Errorf("%w; the kubelet runs on, but its files now point at serve's %s: before it restarts, make serve start (journalctl -u pullguard.service) and run install --restart-kubelet again, or run pullguard uninstall", err, p.ServeSocket)
		}
		return err
	}
	fmt.Fprintf(out, "the kubelet restarted onto serve (%s); doctor passes\n", p.ServeSocket)
	return nil
}

func (o *installOptions) uninstall(ctx context.Context, out io.Writer) error {
	u, err := nodeinstall.PlanUninstall(o.nodeOptions(), o.keepRecords)
	if errors.Is(err, nodeinstall.ErrNotInstalled) {
		fmt.Fprintf(out, "nothing to uninstall: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	if where, err := u.KubeletStillAsksServe(o.nodeOptions()); err != nil {
		return err
	} else if where != "" {
		return fmt.Errorf("%w: %s: the kubelet's own configuration asks serve's socket (a bootstrap recipe's setting?): uninstalled, with serve stopped, the kubelet would have no image service; remove that setting there first, then run uninstall again; nothing was changed", nodeinstall.ErrRefused, where)
	}
	if o.dryRun {
		fmt.Fprintln(out, "pullguard uninstall --dry-run: nothing is written")
	}
	nodeinstall.Print(out, u.Changes)
	if o.keepRecords {
		fmt.Fprintf(out, "%-9s %s: serve's records (--keep-records)\n", nodeinstall.Kept, u.Manifest.Store)
	} else {
		fmt.Fprintf(out, "%-9s %s: serve's store, its records\n", nodeinstall.Remove, u.Manifest.Store)
	}
	if o.dryRun {
		return nil
	}
	files := func() error { return nodeinstall.Uninstall(o.nodeOptions(), u) }
	if o.restartKubelet {
		if err := o.withSystemd(ctx, nil, func(ctx context.Context, r *nodeinstall.Restarter) error {
			return r.Deactivate(ctx, u.Manifest.Units, files)
		}); err != nil {
			return err
		}
	} else if err := files(); err != nil {
		return err
	}
	if u.Kept() {
		fmt.Fprintf(out, "uninstalled, but the files marked kept changed after install: their originals stay under %s\n", filepath.Join(u.Manifest.Store, "install"))
		return nil
	}
	if !o.restartKubelet {
		fmt.Fprintf(out, "next: systemctl daemon-reload && systemctl restart kubelet && systemctl stop %s\n", strings.Join(u.Manifest.Units, " "))
		return nil
	}
	fmt.Fprintln(out, "uninstalled; the kubelet restarted on its own settings")
	return nil
}

// withSystemd runs f with a Restarter on the host's systemd, within
// --timeout.
func (o *installOptions) withSystemd(ctx context.Context, ready func(context.Context) error, f func(context.Context, *nodeinstall.Restarter) error) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	sd, closeFn, err := o.systemd(ctx, o.hostRoot)
	if err != nil {
		return err
	}
	defer closeFn()
	return f(ctx, &nodeinstall.Restarter{Systemd: sd, Ready: ready, Interval: readyInterval})
}

// doctorReady is doctor's checks of the node install set up, as a readiness
// test: nil once they find no problem.
func doctorReady(p *nodeinstall.Plan) func(context.Context) error {
	d := installDoctorOptions(p)
	return func(ctx context.Context) error {
		doc := d.check(ctx)
		if doc.Problems == 0 {
			return nil
		}
		for _, f := range doc.Findings {
			if f.Severity == severityProblem {
				return fmt.Errorf("doctor: %s: %s", f.Check, sanitize(f.What))
			}
		}
		return fmt.Errorf("doctor found %d problem(s)", doc.Problems)
	}
}

// installDoctorOptions are doctor's options for the node of p. The
// kubelet's flags, --config and --config-dir are not the plan's: install
// may have given the kubelet a --config-dir, so doctor reads them as
// systemd starts the kubelet now, under the host root, at each check.
func installDoctorOptions(p *nodeinstall.Plan) *doctorOptions {
	d := &doctorOptions{
		serveSocket:  p.ServeSocket,
		serveMetrics: p.ServeMetrics,
		rootDir:      p.Store,
		timeout:      3 * time.Second,
	}
	if d.serveMetrics == "" {
		d.serveMetrics = "127.0.0.1:10264" // serve's default
	}
	// The node's paths, as serve's unit names them: doctor reaches them
	// under the host root.
	d.set = map[string]bool{"serve-socket": true, "serve-metrics-address": true, "root-dir": true}
	d.hostRoot, d.reachUnder = p.Root, p.Root
	return d
}
