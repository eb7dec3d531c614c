package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/utils/clock"
)

// Severities of a doctor finding.
const (
	severityOK      = "ok"
	severityWarning = "warning"
	severityProblem = "problem"
)

// finding is one thing doctor checked.
type finding struct {
	Severity string `json:"severity"`
	// Check names the check: serve-unit, kubelet-config,
	// image-service-endpoint, pull-throttle, pull-serialization,
	// runtime-endpoint, credential-providers, node-credentials,
	// serve-answers, runtime, serve-protection, record-store.
	Check string `json:"check"`
	What  string `json:"what"`
	// Fix is the file and line or field to change, when there is one.
	Fix string `json:"fix,omitempty"`
}

// doctorDoc is the -o json document of `pullguard doctor`.
type doctorDoc struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Findings   []finding `json:"findings"`
	Problems   int       `json:"problems"`
	Warnings   int       `json:"warnings"`
}

type doctorOptions struct {
	kubeletConfig    string
	kubeletConfigDir string
	flagsFiles       []string
	kubeconfig       string
	nodeName         string
	serveUnit        string
	serveSocket      string
	serveMetrics     string
	rootDir          string
	timeout          time.Duration
	wait             time.Duration
	output           string
	// set tells the options given on the command line, which win over
	// serve's unit and the kubelet's flags files.
	set map[string]bool
	// clock paces --wait.
	clock waitClock
	// hostRoot is the node's root directory, "" for "/": where doctor
	// looks for the kubelet's unit, serve's unit when not given one, and
	// the node's docker credentials files (--host-root, install's).
	hostRoot string
	// reachUnder is where the node's sockets and serve's store are
	// reached, "" for where their paths say: install's checks of a node
	// under --host-root set it to that root, so that the node's paths
	// (serve's socket and store, the runtime's socket from serve's unit)
	// are compared as the node's and reached under the root.
	reachUnder string
}

func newDoctorCommand() *cobra.Command {
	o := &doctorOptions{clock: clock.RealClock{}}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that a node's kubelet goes through pullguard serve, and that serve protects",
		Long: `doctor checks a node where pullguard serve runs beside the kubelet, and prints
each finding with the file and line or flag to change:

  - the kubelet's image service (imageServiceEndpoint, or --image-service-endpoint
    in a flags file) is serve's socket, and serve answers the CRI image service there;
  - serve forwards to the kubelet's own runtime (its containerRuntimeEndpoint is
    serve's --image-service-endpoint), and that runtime answers;
  - serve protects: its /healthz does not say pass-through;
  - the kubelet's pull throttle (registryPullQPS, registryBurst) and serialization
    (serializeImagePulls) let serve's answered pulls through;
  - the kubelet accepts the settings of its file (imagePullCredentialsVerificationPolicy
    with its KubeletEnsureSecretPulledImages gate off makes it refuse to start);
  - serve has the kubelet's --image-credential-provider-config and
    --image-credential-provider-bin-dir, no more, no other;
  - serve searches the node's docker credentials with the kubelet's HOME and working
    directory (read from both units: Environment=HOME=, User=, WorkingDirectory=),
    and its sandbox (ProtectHome, InaccessiblePaths, TemporaryFileSystem) does not
    hide the node credentials file the kubelet reads;
  - serve's record store can be read, or is held by the running serve.

The kubelet's configuration is its file (--kubelet-config), the *.conf drop-ins of
its --config-dir merged over it as the kubelet merges them, then the flags of its
flags files (KUBELET_KUBEADM_ARGS, KUBELET_EXTRA_ARGS...), which override both; with
--kubeconfig, doctor reads the kubelet's effective configuration from its /configz
through the API server instead. serve's flags and sandbox come from its systemd unit
(--serve-unit, with its drop-ins). The exit status is 1 when a finding is a
problem; --wait checks again until none is, for bootstrap scripts.`,
		Example: `  sudo pullguard doctor
  sudo pullguard doctor -o json
  sudo pullguard doctor --wait 2m     # in a bootstrap script, after systemctl start pullguard
  sudo pullguard doctor --kubeconfig /etc/kubernetes/admin.conf
  pullguard doctor --kubelet-config ./config.yaml --kubelet-flags-files ./kubeadm-flags.env`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "text" && o.output != formatJSON {
				return fmt.Errorf("--output must be text or json, not %q", sanitize(o.output))
			}
			o.set = map[string]bool{}
			cmd.Flags().Visit(func(f *pflag.Flag) { o.set[f.Name] = true })
			doc := o.checkUntil(cmd.Context(), cmd.ErrOrStderr())
			if err := writeDoctor(cmd.OutOrStdout(), o.output, doc); err != nil {
				return err
			}
			switch {
			case doc.Problems > 0 && o.wait > 0:
				return fmt.Errorf("doctor found %d problem(s), still after waiting %s", doc.Problems, o.wait)
			case doc.Problems > 0:
				return fmt.Errorf("doctor found %d problem(s)", doc.Problems)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeletConfig, "kubelet-config", "/var/lib/kubelet/config.yaml", "the kubelet's configuration file (its --config; the --config of its flags wins when this is not given)")
	f.StringVar(&o.kubeletConfigDir, "kubelet-config-dir", "", "the kubelet's --config-dir, whose *.conf drop-ins are merged over its configuration file as the kubelet merges them; default: the --config-dir of its flags")
	f.StringSliceVar(&o.flagsFiles, "kubelet-flags-files", defaultKubeletFlagsFiles, "the kubelet's flags files (KUBELET_*ARGS=...), in command-line order; missing ones are skipped. Not given: the kubelet's command line as systemd starts it (kubelet.service, its drop-ins, Environment= and EnvironmentFile=), else these files")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "a kubeconfig allowed to get nodes/proxy: doctor then reads the kubelet's effective configuration from its /configz through the API server")
	f.StringVar(&o.nodeName, "node-name", "", "the node's name, for /configz; default: the kubelet's --hostname-override, else this host's name")
	f.StringVar(&o.serveUnit, "serve-unit", "", "serve's systemd unit, read with its drop-ins for serve's flags and sandbox; default: pullguard.service in systemd's unit directories")
	f.StringVar(&o.serveSocket, "serve-socket", "unix:///run/pullguard/pullguard.sock", "serve's --listen (default: the --listen of serve's unit)")
	f.StringVar(&o.serveMetrics, "serve-metrics-address", "127.0.0.1:10264", "serve's --metrics-bind-address, for /healthz (default: that of serve's unit)")
	f.StringVar(&o.rootDir, "root-dir", SystemRootDir, "serve's --root-dir, holding its record store (default: that of serve's unit)")
	f.DurationVar(&o.timeout, "timeout", 3*time.Second, "how long to wait for each answer of serve, the runtime and the API server")
	f.DurationVar(&o.wait, "wait", 0, "check again every 2s until no finding is a problem or this long has passed (for bootstrap scripts); the exit status tells which")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.hostRoot, "host-root", "", "the node's root file system (from a container: where the host's / is mounted): the kubelet's and serve's units and the node's docker credentials files are read under it; default /")
	return cmd
}

func writeDoctor(w io.Writer, format string, doc doctorDoc) error {
	if format == formatJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	for _, f := range doc.Findings {
		fmt.Fprintf(w, "%-8s %-23s %s\n", strings.ToUpper(f.Severity), f.Check, sanitize(f.What))
		if f.Fix != "" {
			fmt.Fprintf(w, "%-8s %-23s fix: %s\n", "", "", sanitize(f.Fix))
		}
	}
	fmt.Fprintf(w, "\n%d problem(s), %d warning(s).\n", doc.Problems, doc.Warnings)
	return nil
}
