package credtracker

import (
	"github.com/pullguard/pullguard/pkg/imageref"
)

// ErrInvalidImageName is returned for an image reference that cannot be
// parsed into a repository name. It is imageref.ErrInvalid: the error
// wraps distribution/reference's reason as well ("repository name must
// be lowercase", "invalid reference format", ...).
var ErrInvalidImageName = imageref.ErrInvalid

// RepositoryName returns the normalized repository name of an image
// reference as the kubelet computes it (reference.ParseNormalizedNamed's
// Name()): Docker Hub names get "docker.io/" and, for official images,
// "library/"; "alpine:3.19", "docker.io/library/alpine" and
// "index.docker.io/library/alpine@sha256:..." all give
// "docker.io/library/alpine". Nothing else is rewritten: a registry host
// keeps its case, as in the kubelet.
//
// It runs on the decision's hot path. imageref.Parse uses no regular
// expression and allocates only when the name must be rewritten (Docker
// Hub defaults added).
func RepositoryName(image string) (string, error) {
	return imageref.Name(image)
}

// normalizedImage returns the repository name with the reference's tag or
// digest ("docker.io/library/alpine:3.19"), the key of a pull intent, and
// the repository name alone.
func normalizedImage(image string) (key, repo string, err error) {
	repo, suffix, err := splitImage(image)
	if err != nil {
		return "", "", err
	}
	return repo + suffix, repo, nil
}

// splitImage splits an image reference into its normalized repository name
// and its suffix (":tag", "@digest", or "" when neither is given; when both
// are given the digest wins, as it is what the runtime pulls). The suffix is
// a slice of image: a tag or digest always ends the reference.
func splitImage(image string) (repo, suffix string, err error) {
	r, err := imageref.Parse(image)
	if err != nil {
		return "", "", err
	}
	switch {
	case r.Digest != "":
		suffix = image[len(image)-len(r.Digest)-1:]
	case r.Tag != "":
		suffix = image[len(image)-len(r.Tag)-1:]
	}
	return r.Name, suffix, nil
}
