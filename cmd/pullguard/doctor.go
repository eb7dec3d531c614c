package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
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
	// Check names the check: kubelet-config, image-service-endpoint,
	// serve-answers, serve-protection, pull-throttle, pull-serialization,
	// record-store.
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
	kubeletConfig string
	flagsFiles    []string
	serveSocket   string
	serveMetrics  string
	rootDir       string
	timeout       time.Duration
	output        string
}

func newDoctorCommand() *cobra.Command {
	o := &doctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that a node's kubelet goes through pullguard serve, and that serve protects",
		Long: `doctor checks a node where pullguard serve runs beside the kubelet, and prints
each finding with the file and line or field to change:

  - the kubelet's image service (imageServiceEndpoint, or --image-service-endpoint
    in a flags file) is serve's socket, and serve answers the CRI image service there;
  - serve protects: its /healthz does not say pass-through;
  - the kubelet's pull throttle (registryPullQPS, registryBurst) and serialization
    (serializeImagePulls) let serve's answered pulls through;
  - the kubelet accepts the settings of its file (imagePullCredentialsVerificationPolicy
    with its KubeletEnsureSecretPulledImages gate off makes it refuse to start);
  - serve's record store can be read, or is held by the running serve.

The kubelet's flags files are read as the kubelet's unit reads them
(KUBELET_KUBEADM_ARGS, KUBELET_EXTRA_ARGS...): a flag given there overrides the
configuration file. The exit status is 1 when a finding is a problem.`,
		Example: `  sudo pullguard doctor
  sudo pullguard doctor -o json
  pullguard doctor --kubelet-config ./config.yaml --kubelet-flags-files ./kubeadm-flags.env`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "text" && o.output != formatJSON {
				return fmt.Errorf("--output must be text or json, not %q", sanitize(o.output))
			}
			doc := o.check(cmd.Context())
			if err := writeDoctor(cmd.OutOrStdout(), o.output, doc); err != nil {
				return err
			}
			if doc.Problems > 0 {
				return fmt.Errorf("doctor found %d problem(s)", doc.Problems)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeletConfig, "kubelet-config", "/var/lib/kubelet/config.yaml", "the kubelet's configuration file")
	f.StringSliceVar(&o.flagsFiles, "kubelet-flags-files", defaultKubeletFlagsFiles, "the kubelet's flags files (KUBELET_*ARGS=...), in command-line order; missing ones are skipped")
	f.StringVar(&o.serveSocket, "serve-socket", "unix:///run/pullguard/pullguard.sock", "serve's --listen")
	f.StringVar(&o.serveMetrics, "serve-metrics-address", "127.0.0.1:10264", "serve's --metrics-bind-address, for /healthz")
	f.StringVar(&o.rootDir, "root-dir", SystemRootDir, "serve's --root-dir, holding its record store")
	f.DurationVar(&o.timeout, "timeout", 3*time.Second, "how long to wait for each answer of serve")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
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
