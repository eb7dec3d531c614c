// Package keyring holds keyrings: the registry credentials a pod can present
// for an image, from its image pull secrets, the node's docker configuration
// and, via package credentialprovider, exec credential provider plugins.
// Every credential it returns carries its source and its keyed hash.
//
// imagemanager builds each pod's keyring, pkg/podworkers the node's,
// pkg/credentialprovider serves its plugins' answers as one, and
// pkg/criproxy parses image names with it; it depends on pkg/credential and
// pkg/imageref only, never on the credential tracker (TestDependencies).
//
// # Sources
//
// FromSecrets reads kubernetes.io/dockerconfigjson and
// kubernetes.io/dockercfg pull secrets; NodeKeyring reads the first
// node config.json or .dockercfg found in the kubelet's search order
// (DefaultNodeConfigFiles), and CachedNodeKeyring keeps that keyring as
// the kubelet keeps it, read again every NodeConfigLifetime (pullguard
// serve's view of the node's credentials); NewStatic holds a fixed pattern→credential
// map, such as a plugin's response. Merge chains keyrings; a pod's keyring
// is Merge(secrets, node, plugins).
//
// # Matching
//
// Credentials are filed under image patterns (docker config keys or
// matchImages entries) and matched as Pattern documents: a '*' glob per
// host label, an exact port, a path prefix on whole segments, hosts
// compared case-insensitively, Docker Hub spelled "docker.io".
// MatchImage and ImageRegistry expose the rules to other packages.
//
// # Candidate order
//
// Within one keyring, Lookup returns the matching credentials most
// specific first:
//
//  1. a pattern with an exact host before one with a wildcard host;
//  2. then the pattern with more path segments first
//     ("reg.example/team/app" before "reg.example/team" before
//     "reg.example");
//  3. then, among wildcard hosts, the one with more literal (non-'*')
//     characters first ("*.dkr.ecr.us-east-1.amazonaws.com" before
//     "*.*.*.*.amazonaws.com");
//  4. then source order: for pull secrets, the pod's imagePullSecrets
//     order, then the entry order inside each secret's data; for NewStatic,
//     the lexical order of the keys.
//
// All patterns that match one image have the same port (ports must be
// equal), so the port never decides. Merge does not re-sort: it returns
// each keyring's candidates in argument order.
//
// A credential is tried once: a candidate whose keyed hash equals an
// earlier candidate's (the same credential fields for the same registry)
// is left out, keeping the more specific or earlier one and its source.
//
// # Errors
//
// A pull secret that cannot be used is skipped and reported as a
// *SecretError naming the secret and the field, never the content; the
// pod's other secrets keep working. Node config files that cannot be
// read are reported as *ConfigFileError and the next file is tried. Every
// error wraps a category sentinel (ErrInvalidDockerConfig,
// ErrUnsupportedSecretType, ErrMissingSecretData, ErrInvalidPattern,
// ErrInvalidImage) for errors.Is.
//
// Keyrings are immutable once built and safe for concurrent use. Each
// entry caches its credential's hash per registry, so repeated look-ups do
// not hash again.
package keyring
