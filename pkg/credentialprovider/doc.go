// Package credentialprovider holds the kubelet's exec credential provider
// plugins (KEP-2133) as pullguard runs them, and serves their credentials
// through the keyring.Keyring seam.
//
// imagemanager asks it for a pod's credentials, pkg/podworkers builds it
// from the kubelet's flags, and cmd/pullguard builds serve's node keyring
// with it and runs a plugin through it for the kubelet (`pullguard
// credential-provider`: Passthrough); it depends on
// pkg/keyring, pkg/credential, featuregates, internal/reaper (every plugin
// runs under it), internal/leak, internal/safedecode and the kubelet's
// credential provider types.
//
// LoadConfig reads a kubelet CredentialProviderConfig (apiVersion
// kubelet.config.k8s.io/v1, v1beta1 or v1alpha1) from a file or from every
// file of a directory, strictly, and validates it with errors that name the
// file and the field. NewManager resolves each provider's executable under
// the plugin bin directory and returns a Manager; Manager.ForPod returns the
// Keyring a pod's image pulls use.
//
// A look-up runs, in configuration order, every provider whose matchImages
// match the image (keyring.Pattern, the kubelet's matching), asking about
// the image's normalized name as the kubelet does, and answers what the
// kubelet's one keyring of all the answers gives (keyring.LookupAll). Each
// plugin runs in its own process group with a
// timeout, bounded stdout and stderr, and a checked response; its answer is
// cached under the Image, Registry or Global key the plugin asked for, for
// the duration it asked for (or the provider's default), and concurrent
// look-ups that would share a cache entry run the plugin once. Expired
// entries are removed by a janitor driven by an injected clock; a failed
// run is remembered for a short time so that a broken plugin is not run
// for every container.
//
// Providers with tokenAttributes run in service-account-token mode
// (KEP-4412), allowed only when the
// KubeletServiceAccountTokenForCredentialProviders gate is on: the caller's
// ServiceAccountTokenSource supplies the pod's service account and a bound
// token, the cache is keyed per service account (and per token for
// cacheType Token), and the credentials carry the service account as their
// source. Credentials from every other provider carry a node source;
// Manager.ForNode runs only those providers (the node's own credentials,
// which pullguard serve compares a pull's credential with).
//
// Nothing in this package logs or returns credential material or a
// plugin's stdout.
package credentialprovider
