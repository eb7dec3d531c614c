// Package featuregates holds pullguard's feature gates,
// KubeletEnsureSecretPulledImages and
// KubeletServiceAccountTokenForCredentialProviders, registered on a
// k8s.io/component-base feature gate and read once into a Gates value that
// is passed down to the packages that depend on them.
//
// pkg/nodeconfig reads them from the kubelet's configuration and flags,
// cmd/pullguard's doctor checks them, and pkg/credentialprovider takes the
// Gates value; it depends on component-base and apimachinery's version type only,
// and any package may import it.
//
// The gates carry the kubelet's names and versioned specs, and pullguard
// evaluates them at EmulationVersion, so both are on by default, as in a
// kubelet of that version.
package featuregates
