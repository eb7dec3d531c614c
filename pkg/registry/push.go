package registry

import (
	"context"
	"fmt"
	"math/rand"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Pushed describes an image the registry holds after Push or Copy.
type Pushed struct {
	// Repository and Tag are where the image was pushed.
	Repository string
	Tag        string
	// Reference is "HOST/repository:tag".
	Reference string
	// DigestReference is "HOST/repository@digest".
	DigestReference string
	// Digest is the manifest digest, "sha256:...".
	Digest string
	// ConfigDigest is the digest of the image's config blob.
	ConfigDigest string
	// Layers are the digests of the compressed layers, base first.
	Layers []string
}

// Push writes img to repo:tag with go-containerregistry's remote.Write,
// over HTTP, authenticated as AdminUser. Its requests are recorded like
// any client's, under that user.
func (r *Registry) Push(ctx context.Context, repo, tag string, img v1.Image) (Pushed, error) {
	ref, err := name.NewTag(r.Host()+"/"+repo+":"+tag, name.StrictValidation, name.Insecure)
	if err != nil {
		return Pushed{}, fmt.Errorf("failed to push %s:%s: %w", repo, tag, err)
	}
	if err := remote.Write(ref, img, r.adminOptions(ctx)...); err != nil {
		return Pushed{}, fmt.Errorf("failed to push %s: %w", ref, err)
	}
	p, err := describe(img)
	if err != nil {
		return Pushed{}, fmt.Errorf("failed to describe pushed image %s: %w", ref, err)
	}
	p.Repository, p.Tag, p.Reference = repo, tag, ref.String()
	p.DigestReference = ref.Context().Digest(p.Digest).String()
	return p, nil
}

// Copy makes the image at src ("repository:tag" or
// "repository@sha256:...") available as dstRepo:dstTag too, with the same
// manifest digest: the "same digest, two names" case of
// kubernetes/kubernetes#138175. It reads and writes over HTTP as
// AdminUser.
func (r *Registry) Copy(ctx context.Context, src, dstRepo, dstTag string) (Pushed, error) {
	srcRef, err := name.ParseReference(r.Host()+"/"+src, name.StrictValidation, name.Insecure)
	if err != nil {
		return Pushed{}, fmt.Errorf("failed to copy %s: %w", src, err)
	}
	img, err := remote.Image(srcRef, r.adminOptions(ctx)...)
	if err != nil {
		return Pushed{}, fmt.Errorf("failed to copy %s: failed to read it: %w", src, err)
	}
	p, err := r.Push(ctx, dstRepo, dstTag, img)
	if err != nil {
		return Pushed{}, fmt.Errorf("failed to copy %s: %w", src, err)
	}
	return p, nil
}

func (r *Registry) adminOptions(ctx context.Context) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuth(&authn.Basic{Username: AdminUser, Password: r.adminPassword}),
	}
}

// Image returns a small image whose content is a function of seed: layers
// layers of size bytes each. The same arguments give the same digest, so
// tests can name expected digests; different seeds give different images.
func Image(seed int64, layers, size int) (v1.Image, error) {
	//nolint:gosec // deterministic test content, not a secret
	img, err := random.Image(int64(size), int64(layers), random.WithSource(rand.NewSource(seed)))
	if err != nil {
		return nil, fmt.Errorf("failed to build image %d: %w", seed, err)
	}
	return img, nil
}

// describe returns the digests of img.
func describe(img v1.Image) (Pushed, error) {
	d, err := img.Digest()
	if err != nil {
		return Pushed{}, err
	}
	m, err := img.Manifest()
	if err != nil {
		return Pushed{}, err
	}
	p := Pushed{Digest: d.String(), ConfigDigest: m.Config.Digest.String()}
	for _, l := range m.Layers {
		p.Layers = append(p.Layers, l.Digest.String())
	}
	return p, nil
}
