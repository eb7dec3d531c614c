// Package imageref holds the module's one image-name parser, with the
// grammar the kubelet and containerd use: that of
// github.com/distribution/reference (ParseNormalizedNamed and
// ParseDockerRef).
//
// The credential tracker, the allowlist, the keyring and the image manager
// all call it; it depends on distribution/reference (its error values) and
// go-digest only, so any package may import it.
//
// It gives the same answer as distribution/reference for every input (accept
// or reject, normalized name, tag, digest, error class and message; see
// FuzzDifferential), without regular expressions and without allocating for
// a fully qualified name, because it runs on the credential tracker's
// decision path.
package imageref
