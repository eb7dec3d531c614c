package main

import (
	"errors"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/featuregates"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/credentialprovider"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// nodeProviders loads the node's credential providers from the kubelet's
// --image-credential-provider-config (nil when not given): the providers
// without tokenAttributes only, whose credentials the kubelet gives to
// every pod. Service-account-token providers are left out, unrun: their
// credentials stay the pod's. serve calls it before it touches any state.
func (o *serveOptions) nodeProviders(gates featuregates.Gates) (*credentialprovider.Config, error) {
	if o.providerConfig == "" {
		return nil, nil
	}
	if o.providerBinDir == "" {
		return nil, errors.New("--image-credential-provider-bin-dir is required with --image-credential-provider-config")
	}
	cfg, err := credentialprovider.LoadConfig(o.providerConfig)
	if err != nil {
		return nil, err
	}
	node := cfg.NodeProviders()
	if err := node.Validate(gates); err != nil {
		return nil, err
	}
	return node, node.CheckBinaries(o.providerBinDir)
}

// nodeKeyring is what serve knows of the node's own credentials, as the
// kubelet's node keyring holds them: the node's docker config (config.json
// or .dockercfg, first found in the kubelet's search order with the
// kubelet's root directory first, keyring.DefaultNodeConfigFiles; the
// working directory and $HOME there are serve's own, the same as the
// kubelet's when both run as system services) and the node's credential
// providers. The files are checked at every look-up and read again when
// they changed (keyring.CachedNodeKeyring), so serve's view is never older
// than the kubelet's, which reads them when it starts: an operator who
// writes config.json into the root directory and restarts the kubelet has
// it counted by serve at the next pull. The returned function stops the
// providers.
func (o *serveOptions) nodeKeyring(h *credential.Hasher, gates featuregates.Gates, logger klog.Logger) (keyring.Keyring, func(), error) {
	files := keyring.CachedNodeKeyring(h, keyring.DefaultNodeConfigFiles(o.kubeletRootDir), clock.RealClock{}, func(err error) {
		logger.Error(err, "Some of the node's docker config could not be read: passed over, as the kubelet does")
	})
	providers, err := o.nodeProviders(gates)
	if err != nil || providers == nil || len(providers.Providers) == 0 {
		return files, func() {}, err
	}
	for _, w := range providers.Warnings {
		logger.Info("Warning: credential provider config", "warning", w)
	}
	m, err := credentialprovider.NewManager(providers, o.providerBinDir, h, credentialprovider.WithGates(gates), credentialprovider.WithLogger(logger))
	if err != nil {
		return nil, nil, err
	}
	return keyring.Merge(files, m.ForNode()), m.Close, nil
}
