// Package imageref parses container image references with the grammar the
// kubelet and containerd use: that of github.com/distribution/reference
// (ParseNormalizedNamed and ParseDockerRef). It is the one image-name parser
// of the module: the credential tracker, the keyring, the allowlist and the
// image manager all call it.
//
// It gives the same answer as distribution/reference for every input (accept
// or reject, normalized name, tag, digest, error class and message; see
// FuzzDifferential), without regular expressions and without allocating for
// a fully qualified name, because it runs on the credential tracker's
// decision path.
package imageref
