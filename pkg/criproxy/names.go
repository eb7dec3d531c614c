package criproxy

import (
	"github.com/opencontainers/go-digest"

	"github.com/pullguard/pullguard/pkg/imageref"
)

// dockerRef returns the name containerd stores image under, read with the
// module's one image-name grammar (pkg/imageref: distribution/reference's,
// the kubelet's and the tracker's): "alpine", "alpine:latest" and
// "index.docker.io/library/alpine" are "docker.io/library/alpine:latest";
// a tag beside a digest is dropped, as containerd drops it. ok is false
// for a name the grammar rejects.
func dockerRef(image string) (ref string, ok bool) {
	r, err := imageref.Parse(image)
	if err != nil {
		return "", false
	}
	return r.DockerRef(), true
}

// normalizedKey is the key of image's answer windows and proofs
// (podCalls): dockerRef, so that every spelling of one image keys one
// entry, the tracker's grammar and the kubelet's.
//
// Two kinds of name are kept as they are, and so never share an entry
// with a normalized name (a normalized name has a '/' and is read by the
// grammar; an image ID has no '/', a rejected name is not read):
//
//   - an image ID ("sha256:<64 hex>", any digest): containerd's
//     ImageStatus resolves it as an ID before any name, while the grammar
//     reads it as a tag of docker.io/library/sha256. A presence check of
//     that tag opens no window for a pull spelled as the ID, and a pull
//     of the tag proves nothing for a check of the ID.
//   - a name the grammar rejects (a bare 64-hex ID, "registry.example/-a"):
//     the kubelet sends none (it refuses the pod's image first), and
//     go-containerregistry's laxer grammar, which read such names before,
//     folded some of them into names of other images
//     ("registry.example/-a" and "registry.example/-a:latest").
func normalizedKey(image string) string {
	if _, err := digest.Parse(image); err == nil {
		return image
	}
	if ref, ok := dockerRef(image); ok {
		return ref
	}
	return image
}
