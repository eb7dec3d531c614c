package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/pkg/node"
)

type runOptions struct {
	files           []string
	rootDir         string
	runtimeEndpoint string
	imageEndpoint   string
	config          string
	featureGates    string
	policy          string
	providerConfig  string
	providerBinDir  string
	output          string
	concurrent      bool
}

func newRunCommand() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run -f FILE [-f FILE ...]",
		Short: "Ensure the images of the pods in manifest files, as a kubelet would",
		Long: `run reads v1 Secret, ServiceAccount and Pod objects (multi-document YAML or JSON,
like kubectl apply -f) and, for every pod in file order, ensures the image of
every init container and then every container, with the pod's imagePullSecrets
resolved from Secrets of its namespace.

State (the credential records, the hash key and the embedded runtime's images)
is kept under --root-dir: running again with the same root directory is a
kubelet restart.

It exits 0 when every pod was processed, whatever each pod's outcome, and
non-zero, having changed no state, when the input is bad.`,
		Example: `  # Two tenants on the embedded runtime
  pullguard run -f tenants.yaml

  # A node's containerd, with JSON output
  pullguard run -f pods.yaml --container-runtime-endpoint unix:///run/containerd/containerd.sock -o json

  # The stock kubelet behaviour, for comparison
  pullguard run -f pods.yaml --feature-gates KubeletEnsureSecretPulledImages=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "manifest file (YAML or JSON, several documents allowed); repeatable")
	f.StringVar(&o.rootDir, "root-dir", "./pullguard-state", "directory for the credential records, the hash key and the embedded runtime's images")
	f.StringVar(&o.runtimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint of a container runtime, such as unix:///run/containerd/containerd.sock (default: the embedded runtime)")
	f.StringVar(&o.imageEndpoint, "image-service-endpoint", "", "CRI endpoint for the image service, if not --container-runtime-endpoint")
	f.StringVar(&o.config, "config", "", "a kubelet.config.k8s.io/v1beta1 KubeletConfiguration file")
	f.StringVar(&o.featureGates, "feature-gates", "", "feature gates, such as KubeletEnsureSecretPulledImages=false")
	f.StringVar(&o.policy, "image-pull-credentials-verification-policy", "", "NeverVerify, NeverVerifyPreloadedImages (default), NeverVerifyAllowlistedImages or AlwaysVerify")
	f.StringVar(&o.providerConfig, "image-credential-provider-config", "", "a CredentialProviderConfig file or directory")
	f.StringVar(&o.providerBinDir, "image-credential-provider-bin-dir", "", "directory of the credential provider plugins")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	f.BoolVar(&o.concurrent, "concurrent-namespaces", false, "run the pods of different namespaces at the same time, as the kubelet's pod workers do")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

func (o *runOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("--output must be table or json, not %q", o.output)
	}
	// Every input is read and checked before any state is touched.
	manifests, err := node.LoadFiles(o.files...)
	if err != nil {
		return err
	}
	settings, err := node.LoadSettings(o.config, node.Flags{FeatureGates: o.featureGates, Policy: o.policy,
		RuntimeEndpoint: o.runtimeEndpoint, ImageEndpoint: o.imageEndpoint})
	if err != nil {
		return err
	}
	for _, w := range settings.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	endpoint := settings.ImageEndpoint()

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.Start(ctx, node.Config{
		RootDir:                  o.rootDir,
		RuntimeEndpoint:          endpoint,
		Settings:                 settings,
		CredentialProviderConfig: o.providerConfig,
		CredentialProviderBinDir: o.providerBinDir,
		ServiceAccounts:          node.NewManifestTokens(manifests),
		Logger:                   klog.Background(),
	})
	if err != nil {
		return err
	}
	defer n.Close()

	driver := node.NewDriver(&progress{images: n.Images, out: stderr, after: time.Second}, n.Events, node.WithConcurrentNamespaces(o.concurrent))
	results := driver.Run(ctx, manifests)
	if o.output == "json" {
		return writeJSON(stdout, results, n.Events.Events())
	}
	writeTable(stdout, results, n.Events.Events())
	return nil
}

// progress tells the user about a pull that takes more than a moment, on
// standard error, so that standard output stays the result.
type progress struct {
	images *imagemanager.Manager
	out    io.Writer
	after  time.Duration
}

func (p *progress) EnsureImageExists(ctx context.Context, req imagemanager.Request) (imagemanager.Result, error) {
	start := time.Now()
	t := time.AfterFunc(p.after, func() {
		fmt.Fprintf(p.out, "pullguard: still ensuring %s for pod %s/%s (%s)...\n", req.Image, req.Pod.Namespace, req.Pod.Name, time.Since(start).Round(time.Second))
	})
	defer t.Stop()
	return p.images.EnsureImageExists(ctx, req)
}
