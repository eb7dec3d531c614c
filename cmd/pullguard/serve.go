package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/announce"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/pkg/podworkers"
	"github.com/pullguard/pullguard/pkg/secureserving"
)

// EmbeddedEndpoint is the --image-service-endpoint value (as is an empty
// one) that makes serve forward to pullguard's embedded runtime, under
// <root-dir>/runtime: a way to try serve with nothing installed.
const EmbeddedEndpoint = "embedded"

type serveOptions struct {
	listen         string
	backend        string
	rootDir        string
	config         string
	configDir      string
	featureGates   string
	policy         string
	metricsAddr    string
	kubeletRootDir string
	providerConfig string
	providerBinDir string
	unrecorded     string
	grace          time.Duration
	timeout        time.Duration
	answerWindow   time.Duration
	// registryConfigPath is containerd's registry config_path, for the
	// verification requests.
	registryConfigPath string
	// registryTimeout bounds serve's own requests to a registry;
	// registryTimeoutSet says it was given (else the default follows the
	// kubelet's runtimeRequestTimeout: checkRegistryTimeout).
	registryTimeout    time.Duration
	registryTimeoutSet bool
	admin              adminOptions
	// secure is the endpoint on the node's address (--secure-port):
	// k8s.io/apiserver's flags, off by default.
	secure *secureserving.Options
	// vmodule is the root command's --vmodule, which the secure endpoint
	// bounds.
	vmodule string
}

// kubeletRuntimeRequestTimeout is the kubelet's default
// runtimeRequestTimeout.
const kubeletRuntimeRequestTimeout = 2 * time.Minute

func newServeCommand() *cobra.Command {
	o := &serveOptions{secure: secureserving.NewOptions()}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the CRI image service between a kubelet and the container runtime, enforcing the protection",
		Long: `serve is a daemon for a real node: it serves runtime.v1.ImageService on a unix
socket and forwards to the container runtime. Point the kubelet's
imageServiceEndpoint (--image-service-endpoint) at --listen; the kubelet's
containerRuntimeEndpoint stays on the runtime.

An image that some pod could not use without credentials is reported absent by
ImageStatus, so the kubelet pulls it with the pod's credentials: a credential
that already pulled it gets the image at once, any other is checked by the
registry (manifest only). See docs/serve.md.

Started by systemd with a socket (pullguard.socket, LISTEN_FDS), it serves on
that socket, which must be --listen's, and leaves its file to systemd;
otherwise it makes its own. With a NOTIFY_SOCKET (Type=notify) it says
READY=1 once the record store is loaded and the runtime answers.

It runs until SIGTERM or SIGINT: then in-flight pulls finish (or resolve their
intents after --shutdown-grace-period), the record store is closed and the
socket it made removed.`,
		Example: `  pullguard serve --listen unix:///run/pullguard/pullguard.sock \
    --image-service-endpoint unix:///run/containerd/containerd.sock \
    --root-dir /var/lib/pullguard --config /var/lib/kubelet/config.yaml

  # Try it with the embedded runtime, nothing installed
  pullguard serve --listen unix:///tmp/pg.sock --root-dir /tmp/pg --image-service-endpoint embedded`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.registryTimeoutSet = cmd.Flags().Changed("registry-request-timeout")
			if f := cmd.Flags().Lookup("vmodule"); f != nil {
				o.vmodule = f.Value.String()
			}
			return o.run(cmd.Context(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "unix:///run/pullguard/pullguard.sock", "the unix socket to serve the CRI image service on (a socket systemd passes, LISTEN_FDS, must be this one)")
	f.StringVar(&o.backend, "image-service-endpoint", "", `the runtime's CRI socket, such as unix:///run/containerd/containerd.sock; empty or "embedded": pullguard's embedded runtime under --root-dir`)
	f.StringVar(&o.rootDir, "root-dir", "/var/lib/pullguard", "directory for the credential records and the hash key (one serve per directory)")
	f.StringVar(&o.configDir, "config-dir", "", "the kubelet's --config-dir: its *.conf drop-ins are merged over --config as the kubelet merges them (name order, a JSON merge patch each)")
	f.StringVar(&o.config, "config", "", "the kubelet's KubeletConfiguration file, for its imagePullCredentialsVerificationPolicy, preloadedImagesVerificationAllowlist and runtimeRequestTimeout (the bound of --registry-request-timeout); its featureGates are the kubelet's and never switch serve's protection")
	f.StringVar(&o.featureGates, "feature-gates", "", "serve's own feature gates; KubeletEnsureSecretPulledImages=false is the only way to make serve a pass-through proxy (the protection OFF)")
	f.StringVar(&o.policy, "image-pull-credentials-verification-policy", "", "NeverVerify, NeverVerifyPreloadedImages (default), NeverVerifyAllowlistedImages or AlwaysVerify")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:10264", `address for /metrics and /healthz; "" or "0" turns them off`)
	f.StringVar(&o.kubeletRootDir, "kubelet-root-dir", "/var/lib/kubelet", "the kubelet's root directory, whose image_manager records are imported at the first start and whose config.json or .dockercfg is searched first for the node's credentials")
	f.StringVar(&o.providerConfig, "image-credential-provider-config", "", "the kubelet's --image-credential-provider-config: its providers without tokenAttributes give node credentials (see docs/serve.md)")
	f.StringVar(&o.providerBinDir, "image-credential-provider-bin-dir", "", "the kubelet's --image-credential-provider-bin-dir")
	f.StringVar(&o.unrecorded, "unrecorded-images", string(criproxy.UnrecordedVerify), "at the first start, present images no kubelet record covers: verify (each needs one verification) or preloaded")
	f.DurationVar(&o.grace, "shutdown-grace-period", 30*time.Second, "on SIGTERM, how long in-flight pulls may take before they are cancelled")
	f.DurationVar(&o.answerWindow, "pull-answer-window", criproxy.DefaultAnswerWindow, "a pod's pull is answered from a record only this long after that pod's presence check reported the image absent (the kubelet's IfNotPresent path); other pulls (Always containers) go to the registry; 0 answers every pull with a recorded credential")
	f.StringVar(&o.registryConfigPath, "registry-config-path", criruntime.DefaultRegistryConfigPath, "containerd's registry hosts directories (the config_path of its CRI registry configuration, separated by ':'; the default is containerd v2's): the verification of a pull reaches the registry through the same hosts.toml mirrors, CAs and client certificates as the runtime's pull; an absent directory, or \"\", is no configuration")
	f.DurationVar(&o.registryTimeout, "registry-request-timeout", criproxy.DefaultVerificationTimeout, "how long serve's own requests to a registry may take: all of a pull's verifications (every host tried, token fetches and redirects included), and each connection, TLS handshake and wait for an answer's headers; a registry that does not answer by then fails the pull with DeadlineExceeded. Below the kubelet's runtimeRequestTimeout (--config's, else 2m); when not given and that is 30s or less, half of it")
	f.DurationVar(&o.timeout, "runtime-request-timeout", criruntime.DefaultRemoteTimeout, "timeout of the calls to the runtime but PullImage (bounded by the kubelet's own deadline)")
	o.admin.addFlags(f)
	o.secure.AddFlags(f)
	return cmd
}

// checkedServe is everything serve checked before touching any state.
type checkedServe struct {
	socket     string
	settings   nodeconfig.Settings
	unrecorded criproxy.UnrecordedImages
	// registryTimeout is --registry-request-timeout, or its default.
	registryTimeout time.Duration
}

func (o *serveOptions) check() (checkedServe, error) {
	var c checkedServe
	ep, err := criruntime.ParseEndpoint(o.listen)
	if err != nil {
		return c, fmt.Errorf("--listen: %w", err)
	}
	c.socket = strings.TrimPrefix(ep, "unix://")
	if !o.embedded() {
		bep, err := criruntime.ParseEndpoint(o.backend)
		if err != nil {
			return c, fmt.Errorf("--image-service-endpoint: %w", err)
		}
		if bep == ep {
			return c, errors.New("--image-service-endpoint must not be --listen: serve would forward to itself")
		}
	}
	if o.rootDir == "" {
		return c, errors.New("--root-dir is required")
	}
	var kc *kubeletconfig.KubeletConfiguration
	var warnings []string
	switch {
	case o.configDir != "":
		// The kubelet's gate, under which it defaults its configuration,
		// is its own: serve takes the kubelet's default (on).
		kd, err := nodeconfig.LoadKubeletConfigDir(o.config, o.configDir, true)
		if err != nil {
			return c, err
		}
		kc, warnings = kd.KubeletConfiguration, kd.Warnings
	case o.config != "":
		if kc, warnings, err = nodeconfig.LoadKubeletConfig(o.config); err != nil {
			return c, err
		}
	}
	if c.settings, err = nodeconfig.ResolveServeSettings(kc, nodeconfig.Flags{FeatureGates: o.featureGates, Policy: o.policy}); err != nil {
		return c, err
	}
	c.settings.Warnings = append(warnings, c.settings.Warnings...)
	if _, err := o.nodeProviders(c.settings.Gates); err != nil {
		return c, err
	}
	if c.unrecorded, err = criproxy.ParseUnrecordedImages(o.unrecorded); err != nil {
		return c, fmt.Errorf("--unrecorded-images: %w", err)
	}
	if err := o.admin.check(); err != nil {
		return c, err
	}
	o.secure.Complete(o.rootDir)
	if err := o.secure.Validate(); err != nil {
		return c, err
	}
	if o.secure.Enabled() {
		if err := secureserving.CheckVerbosity(o.vmodule); err != nil {
			return c, err
		}
	}
	if o.grace < 0 || o.answerWindow < 0 || o.timeout <= 0 {
		return c, errors.New("--shutdown-grace-period and --pull-answer-window must not be negative, --runtime-request-timeout must be positive")
	}
	timeout, warning, err := checkRegistryTimeout(o.registryTimeout, o.registryTimeoutSet, kc)
	if err != nil {
		return c, err
	}
	c.registryTimeout = timeout
	if warning != "" {
		c.settings.Warnings = append(c.settings.Warnings, warning)
	}
	return c, nil
}

// checkRegistryTimeout returns the registry timeout serve uses: d, which
// must be positive and below the kubelet's runtimeRequestTimeout (kc's,
// else its default), the time the kubelet gives each of its other runtime
// calls (it gives PullImage none), so that serve's own requests never hold
// a pull longer than any runtime call may take. When d was not given (set
// false) and the default is not below that, it is half of it, with a
// warning to log: a kubelet configured with a short runtimeRequestTimeout
// still gets its image service.
func checkRegistryTimeout(d time.Duration, set bool, kc *kubeletconfig.KubeletConfiguration) (time.Duration, string, error) {
	limit, source := kubeletRuntimeRequestTimeout, "the kubelet's default runtimeRequestTimeout"
	if kc != nil && kc.RuntimeRequestTimeout.Duration > 0 {
		limit, source = kc.RuntimeRequestTimeout.Duration, "the runtimeRequestTimeout of --config"
	}
	switch {
	case d <= 0:
		return 0, "", fmt.Errorf("--registry-request-timeout must be positive, got %s", d)
	case d >= limit && !set && limit/2 > 0:
		half := limit / 2
		return half, fmt.Sprintf("--registry-request-timeout is %s, half of %s (%s): its default, %s, is not below it", half, source, limit, d), nil
	case d >= limit:
		return 0, "", fmt.Errorf("--registry-request-timeout must be below %s (%s), got %s: serve's own requests must not hold a pull longer than the kubelet gives any runtime call", source, limit, d)
	}
	return d, "", nil
}

func (o *serveOptions) run(ctx context.Context, stderr io.Writer) error {
	c, err := o.check()
	if err != nil {
		return err
	}
	logger := klog.Background().WithName("serve")
	warnConfiguration(c.settings, stderr, logger)
	if o.metricsOn() {
		// Before the tracker starts, so that its start-up gauges count.
		registerMetrics()
		registerServeMetrics(c.settings.Gates.EnsureSecretPulledImages)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The lock first: nothing under the root directory is touched while
	// another serve holds it.
	lock, err := criproxy.LockRoot(o.rootDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	// Then the socket: a second instance on another root directory is
	// refused before it touches its state. A kubelet that connects before
	// the records are loaded waits for the first answer.
	lis, inherited, err := serveListener(c.socket)
	if err != nil {
		return err
	}
	defer lis.Close()
	sdNotify(logger, "STATUS=Loading the record store")

	backend, err := o.openBackend(ctx, c, logger)
	if err != nil {
		return err
	}
	defer backend.Close(context.Background())

	tracker, hasher, err := o.openTracker(ctx, c, backend, logger)
	if err != nil {
		return err
	}
	defer func() {
		if err := tracker.Close(); err != nil {
			logger.Error(err, "Failed to close the record store")
		}
	}()
	// Loading the store decoded every record in batches (and a first start
	// imported the runtime's images): the batches are garbage now. Return
	// them to the system at once rather than over the scavenger's minutes
	// (docs/benchmarks.md, "serve on a node").
	debug.FreeOSMemory()

	opts := o.proxyOptions(c, logger)
	nodeOpts, stopProviders, err := o.nodeCredentialOptions(c, hasher, logger)
	if err != nil {
		return err
	}
	defer stopProviders()
	srv, err := criproxy.New(backend, tracker, hasher, append(opts, nodeOpts...)...)
	if err != nil {
		return err
	}
	watch, watchOpts := o.admin.newCallWatch(o.metricsOn(), logger)
	gs := criproxy.NewGRPCServer(srv, logger, watchOpts...)
	defer o.admin.startAdmin(o.rootDir, tracker, c.settings.Gates.EnsureSecretPulledImages, logger)()

	var secure *secureStatus
	if o.secure.Enabled() {
		registerSecureServingMetric()
		secure = &secureStatus{addr: o.secure.Address()}
	}
	handler := metricsHandler(backend, healthzFunc(healthzBody(c.settings), watch, secure))
	metricsSrv, err := o.serveMetrics(handler, logger)
	if err != nil {
		return err
	}
	if metricsSrv != nil {
		defer metricsSrv.Close()
	}
	// In the background: it waits for the API server, and for its port
	// and certificate while it cannot have them; the CRI waits for none.
	defer o.startSecure(ctx, handler, secure, logger)()

	// Ready once the runtime answers too: systemd (Type=notify) starts
	// the kubelet only then.
	if !awaitRuntime(ctx, backend, o.backendName(), o.timeout, logger) {
		logger.Info("Stopped before the runtime answered")
		return nil
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(lis) }()
	if watch != nil {
		go watch.Run(ctx)
	}
	logger.Info("Serving the CRI image service", "listen", "unix://"+c.socket, "socketFromSystemd", inherited, "backend", o.backendName(), "gate", c.settings.Gates.EnsureSecretPulledImages, "policy", c.settings.Policy)
	fmt.Fprintf(stderr, "pullguard: serving on unix://%s\n", c.socket)
	sdNotify(logger, "READY=1", "STATUS=Serving on unix://"+c.socket)

	select {
	case err := <-serveErr:
		return fmt.Errorf("the gRPC server stopped: %w", err)
	case <-ctx.Done():
	}
	sdNotify(logger, "STOPPING=1", "STATUS=Stopping: letting in-flight pulls finish")
	o.shutdown(gs, srv, logger)
	logger.Info("Stopped")
	return nil
}

// warnConfiguration logs the configuration's warnings and, when the
// protection is off, says so loudly, in the log and on stderr.
func warnConfiguration(s nodeconfig.Settings, stderr io.Writer, logger klog.Logger) {
	for _, w := range s.Warnings {
		logger.Info("Configuration warning", "warning", w)
	}
	if !s.Gates.EnsureSecretPulledImages {
		logger.Error(nil, "PASS-THROUGH: the protection is OFF, every pod may use every image on the node", "asked", "--feature-gates KubeletEnsureSecretPulledImages=false")
		fmt.Fprintln(stderr, "pullguard: WARNING: pass-through, the protection is OFF (--feature-gates KubeletEnsureSecretPulledImages=false)")
	}
}

// shutdown stops serving: in-flight pulls may finish during the grace
// period, then are cancelled; then it waits, 10 s at most, for the
// handlers of cancelled pulls to resolve their intents (an intent left
// unresolved is taken for an interrupted pull at the next start).
func (o *serveOptions) shutdown(gs *grpc.Server, srv *criproxy.Server, logger klog.Logger) {
	logger.Info("Shutting down: letting in-flight pulls finish", "gracePeriod", o.grace)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.grace):
		logger.Info("Grace period over: cancelling the pulls still in flight")
		gs.Stop()
	}
	// Handlers of cancelled pulls still resolve their intents.
	drainCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Drain(drainCtx); err != nil {
		logger.Error(err, "Some pulls did not resolve their intents; the next start treats them as interrupted")
	}
}

// proxyOptions are the proxy's options. A real runtime's successful pulls
// are checked ("no digest without bytes"): containerd names content it
// holds after a registry only claimed its digest in a HEAD, so pullguard
// GETs the manifest with the pod's credential and hashes it. The embedded
// runtime GETs and hashes every manifest itself, and with the gate off
// pulls behave as without the proxy: no check in either case.
func (o *serveOptions) proxyOptions(c checkedServe, logger klog.Logger) []criproxy.Option {
	opts := []criproxy.Option{criproxy.WithLogger(logger), criproxy.WithAnswerWindow(o.answerWindow), criproxy.WithVerificationTimeout(c.registryTimeout)}
	if !o.embedded() && c.settings.Gates.EnsureSecretPulledImages {
		opts = append(opts, criproxy.WithManifestVerification(guardedpull.RegistryVerifier(
			criruntime.WithRegistryConfigPath(o.registryConfigPath), criruntime.WithRegistryTimeout(c.registryTimeout))))
	}
	return opts
}

// nodeCredentialOptions are, with the protection on, the proxy's sources
// of the node's credentials: its docker config and the plugins the
// provider config gives the node (nodeKeyring), and what
// `pullguard credential-provider` announced (the node's credentials from
// plugins that mint a token per call). The returned func stops the
// plugins; the caller calls it once the proxy is done.
func (o *serveOptions) nodeCredentialOptions(c checkedServe, hasher *credential.Hasher, logger klog.Logger) ([]criproxy.Option, func(), error) {
	if !c.settings.Gates.EnsureSecretPulledImages {
		return nil, func() {}, nil
	}
	node, stopProviders, err := o.nodeKeyring(hasher, c.settings.Gates, logger)
	if err != nil {
		return nil, nil, err
	}
	return []criproxy.Option{
		criproxy.WithNodeKeyring(node, criproxy.DefaultNodeLookupTimeout),
		criproxy.WithAnnouncedCredentials(announce.NewBoard(filepath.Join(o.rootDir, announce.Dir), announce.WithLogger(logger))),
	}, stopProviders, nil
}

func (o *serveOptions) embedded() bool { return o.backend == "" || o.backend == EmbeddedEndpoint }

func (o *serveOptions) backendName() string {
	if o.embedded() {
		return "embedded:" + filepath.Join(o.rootDir, podworkers.RuntimeDir)
	}
	return o.backend
}

func (o *serveOptions) openBackend(ctx context.Context, c checkedServe, logger klog.Logger) (criproxy.Backend, error) {
	if o.embedded() {
		return criruntime.NewEmbedded(filepath.Join(o.rootDir, podworkers.RuntimeDir), criruntime.WithLogger(logger),
			criruntime.WithRegistryTimeout(c.registryTimeout))
	}
	return criproxy.DialBackend(ctx, o.backend, o.timeout)
}

func (o *serveOptions) openTracker(ctx context.Context, c checkedServe, backend criproxy.Backend, logger klog.Logger) (credtracker.Tracker, *credential.Hasher, error) {
	if !c.settings.Gates.EnsureSecretPulledImages {
		h, err := credential.NewRandomHasher()
		return credtracker.Disabled(), h, err
	}
	inv := guardedpull.Inventory(backend)
	tr, err := credtracker.New(ctx, credtracker.Config{
		Dir:       filepath.Join(o.rootDir, podworkers.TrackerDir),
		Policy:    c.settings.Policy,
		Allowlist: c.settings.Allowlist,
	}, inv, credtracker.WithLogger(logger))
	if err != nil {
		return nil, nil, err
	}
	imp, ok := tr.(credtracker.Importer)
	if !ok {
		tr.Close()
		return nil, nil, errors.New("the credential tracker cannot import records")
	}
	if _, err := criproxy.SwitchOver(ctx, imp, inv, o.rootDir, o.kubeletRootDir, c.unrecorded, time.Now(), logger); err != nil {
		tr.Close()
		return nil, nil, err
	}
	return tr, tr.Hasher(), nil
}

// metricsOn says whether serve serves its metrics, on either endpoint.
func (o *serveOptions) metricsOn() bool {
	return (o.metricsAddr != "" && o.metricsAddr != "0") || o.secure.Enabled()
}

// metricsHandler serves /metrics and /healthz, the same on both
// endpoints.
func metricsHandler(backend criproxy.Backend, health func() string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHTTPHandler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if _, err := backend.ImageFsInfo(ctx); err != nil {
			http.Error(w, "image service backend unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, health())
	})
	return mux
}

// serveMetrics serves handler on --metrics-bind-address, the plain
// endpoint for the node itself, or nothing when the address is "" or "0".
func (o *serveOptions) serveMetrics(handler http.Handler, logger klog.Logger) (*http.Server, error) {
	if o.metricsAddr == "" || o.metricsAddr == "0" {
		return nil, nil
	}
	l, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-bind-address: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "The metrics server stopped")
		}
	}()
	logger.Info("Serving /metrics and /healthz", "address", l.Addr().String())
	return srv, nil
}

// The bodies of a healthy /healthz: `pullguard doctor` reads which one.
const (
	healthzProtecting  = "ok: protecting"
	healthzPassThrough = "ok: pass-through, the protection is OFF"
)

// healthzBody is /healthz's body while the backend answers: whether serve
// protects, and with which policy.
func healthzBody(s nodeconfig.Settings) string {
	if !s.Gates.EnsureSecretPulledImages {
		return healthzPassThrough + " (--feature-gates KubeletEnsureSecretPulledImages=false)"
	}
	return fmt.Sprintf("%s (policy %s)", healthzProtecting, s.Policy)
}
