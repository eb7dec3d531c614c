package podworkers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/internal/dirlock"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/credentialprovider"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/keyring"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
)

// Directories under the root directory.
const (
	TrackerDir = "credtracker"
	RuntimeDir = "runtime"
	// LockFile, held by the running process, holds its process ID.
	LockFile = "pullguard.lock"
)

// ErrRootDirInUse: another process holds the root directory.
var ErrRootDirInUse = errors.New("the root directory is in use")

// Config says how to assemble a node.
type Config struct {
	// RootDir holds the state: the tracker's records and hash key, and the
	// embedded runtime's images. The node's docker config is also searched
	// there first, as the kubelet does with its root directory.
	RootDir string
	// RuntimeEndpoint is a CRI socket ("unix:///run/containerd/containerd.sock");
	// empty means the embedded runtime under RootDir.
	RuntimeEndpoint string
	Settings        nodeconfig.Settings
	// CredentialProviderConfig and CredentialProviderBinDir are the
	// kubelet's --image-credential-provider-config and -bin-dir.
	CredentialProviderConfig string
	CredentialProviderBinDir string
	// ServiceAccounts serves service-account-token providers; nil means
	// such providers get no service account.
	ServiceAccounts credentialprovider.ServiceAccountTokenSource
	// ConcurrentNamespaces runs the pods of different namespaces at once.
	ConcurrentNamespaces bool
	Logger               klog.Logger
}

// Node is the kubelet's image machinery, assembled.
type Node struct {
	Runtime imagemanager.ImageService
	Tracker credtracker.Tracker
	Images  *imagemanager.Manager
	Events  *EventLog

	providers *credentialprovider.Manager
	driver    *Driver
	lock      *dirlock.Lock
}

// Start checks cfg, then assembles the node. Every input is checked before
// anything is written under RootDir, so bad input changes no state.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.RootDir == "" {
		return nil, fmt.Errorf("%w: the root directory is required", nodeconfig.ErrInvalidConfig)
	}
	logger := cfg.Logger
	if logger.GetSink() == nil {
		logger = klog.Background()
	}
	providerCfg, err := loadProviderConfig(cfg, logger)
	if err != nil {
		return nil, err
	}

	n := &Node{Events: &EventLog{}}
	ok := false
	defer func() {
		if !ok {
			n.Close()
		}
	}()
	if err := n.openRuntime(ctx, cfg, logger); err != nil {
		return nil, err
	}
	hasher, err := n.openTracker(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	opts := imageManagerOptions(cfg, hasher, logger)
	if providerCfg != nil {
		pm, err := newProviderManager(providerCfg, cfg, hasher, logger)
		if err != nil {
			return nil, err
		}
		n.providers = pm
		opts = append(opts, imagemanager.WithCredentialProviders(pm))
	}
	n.Images, err = imagemanager.New(n.Runtime, n.Tracker, n.Events, opts...)
	if err != nil {
		return nil, err
	}
	n.driver = NewDriver(n.Images, n.Events, WithConcurrentNamespaces(cfg.ConcurrentNamespaces))
	ok = true
	return n, nil
}

// loadProviderConfig reads and checks the credential provider
// configuration, plugins included, and logs its warnings; nil when cfg
// names none. It writes nothing.
func loadProviderConfig(cfg Config, logger klog.Logger) (*credentialprovider.Config, error) {
	if cfg.CredentialProviderConfig == "" {
		return nil, nil
	}
	if cfg.CredentialProviderBinDir == "" {
		return nil, fmt.Errorf("%w: --image-credential-provider-bin-dir is required with --image-credential-provider-config", nodeconfig.ErrInvalidConfig)
	}
	pc, err := credentialprovider.LoadConfig(cfg.CredentialProviderConfig)
	if err != nil {
		return nil, err
	}
	if err := pc.Validate(cfg.Settings.Gates); err != nil {
		return nil, err
	}
	if err := pc.CheckBinaries(cfg.CredentialProviderBinDir); err != nil {
		return nil, err
	}
	for _, w := range pc.Warnings {
		logger.Info("Warning: credential provider config", "warning", w)
	}
	return pc, nil
}

// openRuntime connects to cfg's runtime endpoint, if any, then takes the
// root directory (created if need be) for this process, then, without an
// endpoint, opens the embedded runtime under it. It sets n.Runtime and
// n.lock as they open, so that n.Close releases what did.
func (n *Node) openRuntime(ctx context.Context, cfg Config, logger klog.Logger) error {
	if cfg.RuntimeEndpoint != "" {
		rt, err := criruntime.NewRemote(ctx, cfg.RuntimeEndpoint, criruntime.DefaultRemoteTimeout)
		if err != nil {
			return err
		}
		n.Runtime = rt
	}
	if err := os.MkdirAll(cfg.RootDir, 0o700); err != nil {
		return fmt.Errorf("failed to create the root directory: %w", err)
	}
	// One owner per root directory, before anything under it is opened.
	lock, err := dirlock.Acquire(cfg.RootDir, LockFile)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRootDirInUse, err)
	}
	n.lock = lock
	if n.Runtime == nil {
		rt, err := criruntime.NewEmbedded(filepath.Join(cfg.RootDir, RuntimeDir), criruntime.WithLogger(logger))
		if err != nil {
			return err
		}
		n.Runtime = rt
	}
	return nil
}

// openTracker sets n.Tracker: with the gate on, the credential tracker
// under the root directory, over the runtime's images; with it off, the
// disabled tracker. It returns the hasher of credentials: the tracker's,
// or one with a random key, since nothing is recorded.
func (n *Node) openTracker(ctx context.Context, cfg Config, logger klog.Logger) (*credential.Hasher, error) {
	if !cfg.Settings.Gates.EnsureSecretPulledImages {
		n.Tracker = credtracker.Disabled()
		return credential.NewRandomHasher()
	}
	tr, err := credtracker.New(ctx, credtracker.Config{
		Dir:       filepath.Join(cfg.RootDir, TrackerDir),
		Policy:    cfg.Settings.Policy,
		Allowlist: cfg.Settings.Allowlist,
	}, guardedpull.Inventory(n.Runtime), credtracker.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	n.Tracker = tr
	return tr.Hasher(), nil
}

// imageManagerOptions are the image manager's options but the plugins:
// the hasher, the node's docker config (a malformed file is logged and
// passed over), the kubelet's pull settings, and, for a real runtime with
// the gate on, the check that the registry served the bytes of a pull.
func imageManagerOptions(cfg Config, hasher *credential.Hasher, logger klog.Logger) []imagemanager.Option {
	nodeKeyring, err := keyring.NodeKeyring(hasher, keyring.DefaultNodeConfigFiles(cfg.RootDir))
	if err != nil {
		// A malformed node file is passed over; the node keyring still works.
		logger.Error(err, "Some of the node's docker config could not be read")
	}
	opts := []imagemanager.Option{
		imagemanager.WithHasher(hasher),
		imagemanager.WithNodeKeyring(nodeKeyring),
		imagemanager.WithLogger(logger),
		imagemanager.WithSerializedPulls(cfg.Settings.SerializeImagePulls),
		imagemanager.WithMaxParallelImagePulls(cfg.Settings.MaxParallelImagePulls),
		imagemanager.WithRegistryQPS(cfg.Settings.RegistryPullQPS, cfg.Settings.RegistryBurst),
	}
	if cfg.RuntimeEndpoint != "" && cfg.Settings.Gates.EnsureSecretPulledImages {
		// A real runtime may name content it holds after a registry only
		// claimed its digest; check that the registry serves the bytes.
		// With the gate off, pulls behave as the kubelet's do.
		opts = append(opts, imagemanager.WithManifestVerification(guardedpull.RegistryVerifier()))
	}
	return opts
}

// newProviderManager makes the manager of the plugins pc configures, with
// cfg's gates and service-account tokens; the caller closes it.
func newProviderManager(pc *credentialprovider.Config, cfg Config, hasher *credential.Hasher, logger klog.Logger) (*credentialprovider.Manager, error) {
	popts := []credentialprovider.Option{credentialprovider.WithGates(cfg.Settings.Gates), credentialprovider.WithLogger(logger)}
	if cfg.ServiceAccounts != nil {
		popts = append(popts, credentialprovider.WithServiceAccountTokenSource(cfg.ServiceAccounts))
	}
	return credentialprovider.NewManager(pc, cfg.CredentialProviderBinDir, hasher, popts...)
}

// Run ensures the images of every pod in m and returns the results in file
// order.
func (n *Node) Run(ctx context.Context, m *Manifests) []Result {
	return n.driver.Run(ctx, m)
}

// Close releases the tracker's store, the plugins and the runtime.
func (n *Node) Close() error {
	var errs []error
	if n.providers != nil {
		n.providers.Close()
	}
	if n.Tracker != nil {
		errs = append(errs, n.Tracker.Close())
	}
	if n.Runtime != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		errs = append(errs, n.Runtime.Close(ctx))
	}
	errs = append(errs, n.lock.Release()) // last: the state is closed
	return errors.Join(errs...)
}
