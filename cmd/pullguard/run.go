package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

type runOptions struct {
	files           []string
	recursive       bool
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
	metricsFile     string
	dumpMetrics     bool
}

func newRunCommand() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run -f FILE|DIR|- [-f ...]",
		Short: "Ensure the images of the pods in manifest files, as a kubelet would",
		Long: `run reads v1 Secret, ServiceAccount and Pod objects (multi-document YAML or JSON,
like kubectl apply -f: a file, a directory's *.yaml, *.yml and *.json files,
with -R its subdirectories' too, or - for standard input) and, for every pod in
file order, ensures the image of every init container and then every
container, with the pod's imagePullSecrets resolved from Secrets of its
namespace. Each input is limited to 8 MiB.

State (the credential records, the hash key and the embedded runtime's images)
is kept under --root-dir: running again with the same root directory is a
kubelet restart.

It exits 0 when every pod was processed, whatever each pod's outcome, and 1,
having changed no state, when the input is bad. SIGINT or SIGTERM stops the
run: the pull in flight is cancelled and its intent resolved, no other
container starts, what was done is printed, and the exit code is 130 or 143.`,
		Example: `  # Two tenants on the embedded runtime
  pullguard run -f tenants.yaml

  # Every manifest under a directory, read from standard input too
  pullguard run -f manifests/ -R
  cat pods.yaml | pullguard run -f -

  # A node's containerd, with JSON output and the metrics
  pullguard run -f pods.yaml --container-runtime-endpoint unix:///run/containerd/containerd.sock -o json --metrics-file metrics.prom

  # The stock kubelet behaviour, for comparison
  pullguard run -f pods.yaml --feature-gates KubeletEnsureSecretPulledImages=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "manifest file, directory, or - for standard input (YAML or JSON, several documents allowed); repeatable")
	f.BoolVarP(&o.recursive, "recursive", "R", false, "read the manifests of -f directories' subdirectories too")
	f.StringVar(&o.rootDir, "root-dir", defaultRootDir(), rootDirUsage)
	f.StringVar(&o.runtimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint of a container runtime, such as unix:///run/containerd/containerd.sock (default: the embedded runtime)")
	f.StringVar(&o.imageEndpoint, "image-service-endpoint", "", "CRI endpoint for the image service, if not --container-runtime-endpoint")
	f.StringVar(&o.config, "config", "", "a kubelet.config.k8s.io/v1beta1 KubeletConfiguration file")
	f.StringVar(&o.featureGates, "feature-gates", "", "feature gates, such as KubeletEnsureSecretPulledImages=false")
	f.StringVar(&o.policy, "image-pull-credentials-verification-policy", "", "NeverVerify, NeverVerifyPreloadedImages (default), NeverVerifyAllowlistedImages or AlwaysVerify")
	f.StringVar(&o.providerConfig, "image-credential-provider-config", "", "a CredentialProviderConfig file or directory")
	f.StringVar(&o.providerBinDir, "image-credential-provider-bin-dir", "", "directory of the credential provider plugins")
	f.StringVarP(&o.output, "output", "o", formatTable, "output format: table, wide, json or yaml")
	f.BoolVar(&o.concurrent, "concurrent-namespaces", false, "run the pods of different namespaces at the same time, as the kubelet's pod workers do")
	f.StringVar(&o.metricsFile, "metrics-file", "", "write the metrics, in Prometheus text format, to this file when the run ends")
	f.BoolVar(&o.dumpMetrics, "dump-metrics", false, "print the metrics, in Prometheus text format, to standard error when the run ends")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

func (o *runOptions) run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
	manifests, settings, err := o.readInputs(stdin, stderr)
	if err != nil {
		return err
	}
	endpoint := settings.ImageEndpoint()
	registerMetrics()

	// SIGINT and SIGTERM cancel the run; the signal decides the exit code.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var caught os.Signal
	caughtCh := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sigs:
			caughtCh <- s
			cancel()
		case <-ctx.Done():
		}
	}()

	n, err := podworkers.Start(ctx, podworkers.Config{
		RootDir:                  o.rootDir,
		RuntimeEndpoint:          endpoint,
		Settings:                 settings,
		CredentialProviderConfig: o.providerConfig,
		CredentialProviderBinDir: o.providerBinDir,
		ServiceAccounts:          podworkers.NewManifestTokens(manifests),
		Logger:                   klog.Background(),
	})
	if err != nil {
		select {
		case s := <-caughtCh:
			return &stoppedError{sig: s, total: containerCount(manifests)}
		default:
			return err
		}
	}
	n.Events.Host, _ = os.Hostname()
	warnUnrecorded(ctx, stderr, n, settings)

	driver := podworkers.NewDriver(&progress{images: n.Images, out: stderr, clock: clock.RealClock{}, every: progressInterval}, n.Events, podworkers.WithConcurrentNamespaces(o.concurrent))
	results := driver.Run(ctx, manifests)
	cancel()
	select {
	case caught = <-caughtCh:
	case caught = <-sigs: // arrived as the run ended
	default:
	}
	// Close resolves nothing more: every intent in flight was resolved by
	// its cancelled pull; closing releases the store and the runtime.
	if err := n.Close(); err != nil {
		klog.Background().Error(err, "Failed to close the node cleanly")
	}

	interrupted := ""
	if caught != nil {
		interrupted = signalName(caught)
	}
	if err := writeRun(stdout, o.output, newRunOutput(results, n.Events.Events(), interrupted)); err != nil {
		return err
	}
	if err := o.writeMetrics(stderr); err != nil {
		return err
	}
	if caught != nil {
		return &stoppedError{sig: caught, done: len(results), total: containerCount(manifests)}
	}
	return nil
}

// readInputs reads and checks every input of the run before any state is
// touched: the output format, the manifests, the size of the provider
// config and the node's settings, whose warnings it writes to stderr.
func (o *runOptions) readInputs(stdin io.Reader, stderr io.Writer) (*podworkers.Manifests, nodeconfig.Settings, error) {
	if err := checkFormat(o.output); err != nil {
		return nil, nodeconfig.Settings{}, err
	}
	manifests, err := podworkers.ReadManifests(podworkers.ReadOptions{Recursive: o.recursive, Stdin: stdin}, o.files...)
	if err != nil {
		return nil, nodeconfig.Settings{}, err
	}
	if o.providerConfig != "" {
		if err := checkConfigSize(o.providerConfig); err != nil {
			return nil, nodeconfig.Settings{}, err
		}
	}
	settings, err := nodeconfig.LoadSettings(o.config, nodeconfig.Flags{FeatureGates: o.featureGates, Policy: o.policy,
		RuntimeEndpoint: o.runtimeEndpoint, ImageEndpoint: o.imageEndpoint})
	if err != nil {
		return nil, nodeconfig.Settings{}, err
	}
	for _, w := range settings.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	return manifests, settings, nil
}

func (o *runOptions) writeMetrics(stderr io.Writer) error {
	if o.metricsFile != "" {
		if err := writeMetricsFile(o.metricsFile); err != nil {
			return err
		}
	}
	if o.dumpMetrics {
		return writeMetrics(stderr)
	}
	return nil
}

func containerCount(m *podworkers.Manifests) int {
	n := 0
	for _, p := range m.Pods {
		n += len(p.Spec.InitContainers) + len(p.Spec.Containers)
	}
	return n
}

// checkConfigSize bounds a credential provider configuration, a file or
// the files of a directory, before it is read.
func checkConfigSize(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return nil // the loader reports it, with its own words
	}
	files := []string{path}
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil
		}
		files = files[:0]
		for _, e := range entries {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() && fi.Size() > podworkers.MaxInputBytes {
			return fmt.Errorf("%w: %s is larger than the limit of %d bytes", podworkers.ErrInputTooLarge, f, podworkers.MaxInputBytes)
		}
	}
	return nil
}

// stoppedError is a run stopped by a signal.
type stoppedError struct {
	sig         os.Signal
	done, total int
}

func (e *stoppedError) Error() string {
	return fmt.Sprintf("interrupted by %s: %d of %d containers processed; the pull in flight was cancelled and its intent resolved", signalName(e.sig), e.done, e.total)
}

// code is the shell's code for a process killed by the signal: 128+n.
func (e *stoppedError) code() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}
