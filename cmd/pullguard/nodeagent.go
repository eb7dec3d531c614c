package main

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/pkg/nodeagent"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// defaultAgentStatusFile is where the agent writes its status in its pod.
const defaultAgentStatusFile = "/run/pullguard-node-agent/status.json"

type nodeAgentOptions struct {
	hostRoot, binaryPath, binarySource string
	serveArgs                          []string
	serveToken, serveKubeconfig        string
	statusFile, kubeconfig             string
	leaseName, leaseNamespace          string
	node, podName, podNamespace        string
	podUID                             string
	timeout, recheck                   time.Duration
	maxFailed                          int
}

func newNodeAgentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node-agent",
		Short: "What the pod of pullguard's DaemonSet runs on each node: install (or uninstall), one node at a time, and say why in its readiness",
		Long: `node-agent runs in a privileged pod of pullguard's DaemonSet, the host's / mounted
at --host-root. "node-agent install" puts pullguard on the node: its binary
(copied from the pod to --binary-path, unless the node's package put serve's units
under /usr/lib/systemd/system), serve's units and flags, serve's kubeconfig (from
--serve-token-file and the kubelet's own --kubeconfig), the kubelet's settings;
then it restarts the kubelet through the host's systemd (D-Bus) and waits for
doctor. One node at a time: it takes the Lease --lease-name first. A node that
already has it all is only checked; one where only serve's files changed (a new
image) restarts serve alone. A node where doctor does not pass is given back as it
was; a kubelet configuration install refuses leaves the node untouched. Then it
stays running: "node-agent ready" (the readiness probe) prints why and exits 1
when the node is not ready, and the agent records an Event on its Pod.

"node-agent uninstall" takes pullguard off the node, one node at a time, then
stays running, ready. SIGTERM ends either at once and never touches the node.`,
	}
	cmd.AddCommand(newNodeAgentRunCommand("install"), newNodeAgentRunCommand("uninstall"), newNodeAgentReadyCommand())
	return cmd
}

func newNodeAgentRunCommand(mode string) *cobra.Command {
	o := &nodeAgentOptions{}
	cmd := &cobra.Command{
		Use:   mode,
		Short: map[string]string{"install": "Install pullguard on this node, then stay running", "uninstall": "Take pullguard off this node, then stay running"}[mode],
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a, err := o.agent(mode)
			if err != nil {
				return err
			}
			if err := a.Start(ctx); err != nil {
				return err
			}
			if mode == "install" {
				a.Watch(ctx, o.recheck, a.Install(ctx))
			} else {
				a.Uninstall(ctx)
			}
			<-ctx.Done()
			klog.InfoS("node agent: stopped; the node is left as it is")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.hostRoot, "host-root", "/host", "where the host's / is mounted in the pod")
	f.StringVar(&o.statusFile, "status-file", defaultAgentStatusFile, "the agent's status, which \"node-agent ready\" reads")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "the agent's own kubeconfig (for the Lease and its Events); default: its pod's ServiceAccount (in-cluster)")
	f.StringVar(&o.leaseName, "lease-name", nodeagent.DefaultLeaseName, "the coordination.k8s.io Lease that lets one node at a time be switched")
	f.StringVar(&o.leaseNamespace, "lease-namespace", "", "the Lease's namespace (default: the pod's, $POD_NAMESPACE)")
	f.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "this node's name, the Lease's holder (default $NODE_NAME, from the downward API)")
	f.StringVar(&o.podName, "pod-name", os.Getenv("POD_NAME"), "the agent's pod, for its Events (default $POD_NAME)")
	f.StringVar(&o.podNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the agent's pod's namespace (default $POD_NAMESPACE)")
	f.StringVar(&o.podUID, "pod-uid", os.Getenv("POD_UID"), "the agent's pod's UID (default $POD_UID)")
	f.IntVar(&o.maxFailed, "max-failed-nodes", nodeagent.DefaultMaxFailed, "halt the rollout once this many nodes failed (the Lease's annotation "+nodeagent.FailedAnnotation+" lists them): no further node is switched until an operator clears it; 0: never halt")
	f.DurationVar(&o.timeout, "timeout", nodeagent.DefaultTimeout, "how long a restart and doctor's checks after it may take before the node is given back")
	if mode == "install" {
		f.DurationVar(&o.recheck, "recheck-interval", nodeagent.DefaultRecheckInterval, "once installed, how often doctor checks the node again: the pod turns not ready (DoctorFailed) when it no longer passes, ready when it passes again; 0: never")
		f.StringVar(&o.binaryPath, "binary-path", nodeagent.DefaultBinaryPath, "where on the node pullguard's binary is put for serve (\"\": none, the node's package serves)")
		f.StringVar(&o.binarySource, "binary-source", "/proc/self/exe", "the binary to copy there")
		f.StringArrayVar(&o.serveArgs, "serve-arg", nil, "a flag of serve (--name=value) set in serve's drop-in; repeat for more")
		f.StringVar(&o.serveToken, "serve-token-file", "", "serve's ServiceAccount token, mounted from a Secret; with it the agent writes serve's kubeconfig and gives serve --authentication-kubeconfig and --authorization-kubeconfig")
		f.StringVar(&o.serveKubeconfig, "serve-kubeconfig", nodeagent.DefaultServeKubeconfig, "where on the node serve's kubeconfig is written (0600)")
	}
	return cmd
}

func (o *nodeAgentOptions) agent(mode string) (*nodeagent.Agent, error) {
	if o.node == "" {
		return nil, fmt.Errorf("--node-name (or $NODE_NAME) is required: it holds the Lease")
	}
	ns := firstNonEmpty(o.leaseNamespace, o.podNamespace)
	if ns == "" {
		return nil, fmt.Errorf("--lease-namespace (or $POD_NAMESPACE) is required")
	}
	check := o.serveArgs
	if o.serveToken != "" {
		check = append([]string{"--authentication-kubeconfig=" + o.serveKubeconfig, "--authorization-kubeconfig=" + o.serveKubeconfig}, check...)
	}
	if err := checkServeArgs(check); err != nil {
		return nil, err
	}
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	// The two API groups the agent uses, not a whole clientset.
	leases, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("the agent's client: %w", err)
	}
	events, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("the agent's client: %w", err)
	}
	c := nodeagent.Config{Root: o.hostRoot, ServeArgs: o.serveArgs, ServeToken: o.serveToken, ServeKubeconfig: o.serveKubeconfig, Timeout: o.timeout}
	if mode == "install" && o.binaryPath != "" {
		c.Binary = &nodeinstall.Binary{Path: o.binaryPath, Source: o.binarySource}
	}
	var secrets []string
	if o.serveToken != "" {
		if t, err := boundedread.ReadFile(o.serveToken, 64<<10); err == nil && len(bytes.TrimSpace(t)) > 0 {
			secrets = append(secrets, string(bytes.TrimSpace(t)))
		}
	}
	return &nodeagent.Agent{
		Config:  c,
		Systemd: dialSystemd,
		Doctor:  nodeReady,
		// The holder names the mode too: an uninstall agent beside an
		// install agent on one node waits for it, as another node would.
		Lease: &nodeagent.Lease{Client: leases, Namespace: ns, Name: o.leaseName, Holder: o.node + "/" + mode, Duration: c.LeaseDuration(), Clock: clock.RealClock{}, MaxFailed: o.maxFailed},
		Report: &nodeagent.Reporter{
			StatusFile: o.statusFile,
			Client:     events,
			Pod:        nodeagent.PodRef{Namespace: o.podNamespace, Name: o.podName, Node: o.node, UID: types.UID(o.podUID)},
			Clock:      clock.RealClock{},
			Secrets:    secrets,
		},
		Clock:    clock.RealClock{},
		Interval: readyInterval,
	}, nil
}

// restConfig is the agent's own: its --kubeconfig, else in-cluster; every
// request bounded.
func (o *nodeAgentOptions) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("the agent's API server: %w", err)
	}
	cfg.Timeout = 30 * time.Second
	cfg.UserAgent = nodeagent.Component
	return cfg, nil
}

func newNodeAgentReadyCommand() *cobra.Command {
	statusFile := defaultAgentStatusFile
	cmd := &cobra.Command{
		Use:   "ready",
		Short: "The agent's readiness probe: print why the node is (not) ready; exit 1 when not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := nodeagent.ReadStatus(statusFile)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), sanitize(s.String()))
			if !s.Ready {
				return errNotReady
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&statusFile, "status-file", statusFile, "the agent's status file")
	return cmd
}

// errNotReady ends `node-agent ready` with status 1, its reason printed.
var errNotReady = fmt.Errorf("not ready")
