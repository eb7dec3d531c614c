package criruntime

import (
	"fmt"
	"net"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// dockerHub is how containerd and the kubelet print Docker Hub's registry;
// go-containerregistry calls it name.DefaultRegistry ("index.docker.io").
const dockerHub = "docker.io"

// NormalizeImage returns image the way containerd and the kubelet print
// image names: "alpine" is "docker.io/library/alpine:latest",
// "127.0.0.1:5000/team-a/app@sha256:..." stays as it is. A reference with
// both a tag and a digest keeps only the digest, as containerd does.
func NormalizeImage(image string) (string, error) {
	ref, err := parseReference(image)
	if err != nil {
		return "", err
	}
	return canonicalName(ref), nil
}

// ImageNames returns every name of img: its RepoTags, then its RepoDigests.
func ImageNames(img *runtimeapi.Image) []string {
	if img == nil {
		return nil
	}
	names := make([]string, 0, len(img.RepoTags)+len(img.RepoDigests))
	names = append(names, img.RepoTags...)
	return append(names, img.RepoDigests...)
}

// parseReference parses an image reference with Docker Hub defaults (no
// registry means docker.io, no tag means latest). Loopback registries are
// marked insecure so they are reached over plain HTTP, like containerd does.
func parseReference(image string) (name.Reference, error) {
	if image == "" {
		return nil, fmt.Errorf("%w: empty image name", ErrInvalidReference)
	}
	if IsImageID(image) {
		return nil, fmt.Errorf("%w: %q is an image ID, not a name", ErrInvalidReference, image)
	}
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidReference, image, err)
	}
	if isLoopback(ref.Context().RegistryStr()) {
		ref, err = name.ParseReference(image, name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrInvalidReference, image, err)
		}
	}
	return ref, nil
}

// canonicalRepo is the repository as containerd prints it.
func canonicalRepo(repo name.Repository) string {
	reg := repo.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = dockerHub
	}
	return reg + "/" + repo.RepositoryStr()
}

// canonicalName is the reference as containerd prints it.
func canonicalName(ref name.Reference) string {
	if d, ok := ref.(name.Digest); ok {
		return canonicalRepo(d.Repository) + "@" + d.DigestStr()
	}
	return canonicalRepo(ref.Context()) + ":" + ref.Identifier()
}

// digestName is repo@digest, the RepoDigests form.
func digestName(repo name.Repository, d v1.Hash) string {
	return canonicalRepo(repo) + "@" + d.String()
}

// isDigestName says whether a canonical name is a RepoDigests entry.
func isDigestName(n string) bool { return strings.Contains(n, "@") }

// IsImageID says whether s has the form of an image ID ("sha256:<64 hex>").
func IsImageID(s string) bool {
	h, err := v1.NewHash(s)
	return err == nil && h.Algorithm == "sha256"
}

// isLoopback says whether a registry host[:port] is on the loopback
// interface.
func isLoopback(registry string) bool {
	host := registry
	if h, _, err := net.SplitHostPort(registry); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
