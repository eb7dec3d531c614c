package criruntime

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ResolvedDigests returns the digests VerifyManifest must accept after a
// runtime reported a pull of image done, img being the runtime's status of
// the pulled image: the digests of img's RepoDigests in image's
// repository (what the runtime resolved the reference to there). For a
// digest reference it returns nil: the bytes must hash to the reference's
// own digest. A tag reference whose image has no digest in that
// repository is an error, so that a caller fails closed.
func ResolvedDigests(image string, img *runtimeapi.Image) ([]string, error) {
	ref, err := parseReference(image)
	if err != nil {
		return nil, err
	}
	if _, byDigest := ref.(name.Digest); byDigest {
		return nil, nil
	}
	repo := ref.Context().Name()
	var out []string
	for _, rd := range img.GetRepoDigests() {
		d, err := name.NewDigest(rd, name.Insecure)
		if err != nil || d.Context().Name() != repo {
			continue
		}
		out = append(out, d.DigestStr())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the runtime reports no digest of %q in %s", image, canonicalRepo(ref.Context()))
	}
	return out, nil
}
