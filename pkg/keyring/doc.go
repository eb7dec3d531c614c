// Package keyring holds keyrings: the registry credentials a pod can present
// for an image, from its image pull secrets, the node's docker configuration
// and, via package credentialprovider, exec credential provider plugins.
// Every credential it returns carries its source and its keyed hash.
//
// imagemanager builds each pod's keyring, pkg/podworkers the node's,
// pkg/credentialprovider serves its plugins' answers as one, pkg/announce
// files announcements by its patterns, and pkg/criproxy parses image names
// with it; it depends on pkg/credential and pkg/imageref only, never on the
// credential tracker or its store (docs/imports.txt).
//
// # Sources
//
// FromSecrets reads kubernetes.io/dockerconfigjson and
// kubernetes.io/dockercfg pull secrets; NodeKeyring reads the first
// node config.json or .dockercfg found in the kubelet's search order
// (DefaultNodeConfigFiles), and CachedNodeKeyring keeps that keyring for
// pullguard serve (its view of the node's credentials); NewStatic holds a
// fixed key→credential map, such as a plugin's response. Merge chains
// keyrings; a pod's keyring is Merge(secrets, node, plugins).
//
// # Matching, as the kubelet matches
//
// Every keyring files its credentials as the kubelet's BasicDockerKeyring
// (k8s.io/kubernetes pkg/credentialprovider) files them, and answers as it
// does, so that serve's view of which credentials the kubelet hands a pod
// is the kubelet's, and a node credential frees exactly the images the
// kubelet gives it for:
//
//   - a docker config key, or a plugin's auth key, is filed under
//     ConfigKey: "https://" put in front unless it has a scheme, parsed
//     with net/url, a leading "/v1/" or "/v2/" dropped from its path, the
//     host followed by the path; keys that file alike are one key, and a
//     key net/url rejects is skipped;
//   - a key (and a plugin's matchImages entry) matches an image as a
//     Pattern: read as the kubelet's URLsMatchStr reads it, against the
//     image's normalized name (Image.Name, "docker.io/library/alpine" for
//     "alpine"): equal ports, as many host labels, a '*' glob per label
//     (path/filepath.Match), the key's path a string prefix of the
//     image's, everything case-sensitive, no alias folded;
//   - when no key matched a Docker Hub image (Image.DockerHub), the
//     credentials of the key "index.docker.io" ("https://index.docker.io/v1/")
//     are its candidates.
//
// MatchImage, ParsePattern, ConfigKey and ParseImage expose the rules to
// other packages. Image.Registry, the registry a candidate's keyed hash is
// for, is another matter: lower case, Docker Hub's aliases folded into
// "docker.io", so that a hash does not depend on how an image is spelled.
//
// # Candidate order
//
// Within one keyring, Lookup returns the matching credentials as the
// kubelet does: keys in reverse lexical (byte) order, so a longer path
// comes before its prefix and a literal host before a '*' glob over it;
// the credentials filed under one key in the order they were added (for
// pull secrets, the pod's imagePullSecrets order, then file order; for
// NewStatic, the lexical order of the raw keys). LookupAll looks several
// keyrings up as one, as the kubelet looks up its plugins' answers. Merge
// returns each keyring's candidates in argument order, as the kubelet's
// UnionDockerKeyring: a pod's keyring is Merge(secrets, node, plugins).
// Nothing is left out: a credential filed under two matching keys, or
// held by two keyrings, is a candidate twice, as in the kubelet. An entry
// without any credential field is a candidate too (an anonymous pull).
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
// not hash again; a look-up parses the image once, walks the keys
// without allocating, and allocates the candidate list once.
package keyring
