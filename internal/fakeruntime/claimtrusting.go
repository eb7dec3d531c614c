package fakeruntime

import (
	"context"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ClaimTrusting is a CRI image service that pulls as containerd 1.6
// resolves a reference: a HEAD of the manifest with the pull's credential,
// and when the answer's Docker-Content-Digest names content it holds (a
// repo digest of one of its images), it names that content under the
// pulled reference, and under the pulled repository at that digest,
// without fetching a byte. It holds only what the test gives it (Add) and
// downloads nothing; a pull of anything else fails. Its errors are gRPC
// statuses, as containerd's CRI gives them.
type ClaimTrusting struct {
	Images

	mu    sync.Mutex
	pulls int
}

// Pulls is how many times PullImage was called.
func (c *ClaimTrusting) Pulls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pulls
}

func (c *ClaimTrusting) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	c.mu.Lock()
	c.pulls++
	c.mu.Unlock()
	image := spec.GetImage()
	ref, err := name.ParseReference(image, name.Insecure)
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "bad image %q", image)
	}
	var a authn.Authenticator = authn.Anonymous
	if auth != nil {
		a = authn.FromConfig(authn.AuthConfig{Username: auth.GetUsername(), Password: auth.GetPassword(), Auth: auth.GetAuth()})
	}
	desc, err := remote.Head(ref, remote.WithAuth(a), remote.WithContext(ctx))
	if err != nil {
		return "", status.Errorf(codes.Unknown, "failed to pull and unpack image %q: failed to resolve reference: %v", image, err)
	}
	claimed := "@" + desc.Digest.String()
	c.Images.mu.Lock()
	defer c.Images.mu.Unlock()
	for id, img := range c.byID {
		for _, rd := range img.RepoDigests {
			if strings.HasSuffix(rd, claimed) {
				c.name(id, repository(image)+claimed)
				c.name(id, image)
				return id, nil
			}
		}
	}
	return "", status.Errorf(codes.Unknown, "failed to pull %q: this test runtime only names content it holds", image)
}
