package criruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PullImage pulls spec.Image with auth and returns the image ID (the config
// digest). The registry is always asked first: the manifest the reference
// names is fetched with a GET, authenticated with auth, so a refused
// credential fails the pull even when the image is present. The digest of a
// pull is the SHA-256 of the bytes the registry served, never a digest the
// registry claims in a header: a registry that only claims the digest of a
// manifest stored here proves nothing and gets nothing. When that manifest
// is already stored, the GET is all: the name is recorded and no blob is
// fetched. Otherwise the missing manifests, config and layers are fetched
// and verified. Loopback registries are reached over plain HTTP. The
// sandbox config is not used.
func (e *Embedded) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	if spec == nil || spec.Image == "" {
		return "", fmt.Errorf("%w: no image given", ErrInvalidReference)
	}
	ref, err := parseReference(spec.Image)
	if err != nil {
		return "", err
	}
	image := canonicalName(ref)
	logger := e.opts.logger.WithValues("image", image)
	logger.V(3).Info("Pulling image")
	id, fetched, err := e.pull(ctx, ref, auth)
	if err != nil {
		logger.V(2).Info("Pull failed", "err", err.Error())
		return "", fmt.Errorf("failed to pull image %q: %w", image, err)
	}
	logger.V(2).Info("Pulled image", "imageID", id, "fetchedContent", fetched)
	return id.String(), nil
}

// pull resolves ref and stores what is missing; fetched says whether
// anything beyond the manifest request was needed.
func (e *Embedded) pull(ctx context.Context, ref name.Reference, auth *runtimeapi.AuthConfig) (v1.Hash, bool, error) {
	p, err := remote.NewPuller(
		remote.WithAuth(authenticator(auth)),
		remote.WithTransport(newChallengeTransport(e.opts.transport, ref.Context().RegistryStr(), auth)),
		remote.WithUserAgent(e.opts.userAgent),
		remote.WithPlatform(e.opts.platform),
		// No retries, as in containerd: go-containerregistry's backoff
		// sleeps whatever the context, past the registry deadline. The
		// kubelet retries a failed pull with its own backoff.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
	)
	if err != nil {
		return v1.Hash{}, false, err
	}
	desc, raw, err := e.resolve(ctx, p, ref)
	if err != nil {
		return v1.Hash{}, false, fmt.Errorf("failed to resolve reference %q: %w", canonicalName(ref), registryFailure(err, auth))
	}
	names := namesFor(ref, desc.Digest)
	if id, found, err := e.addNames(desc.Digest, nil, names); err != nil || found {
		return id, false, err
	}

	l := e.newLease()
	defer l.release()
	t, err := e.fetch(ctx, p, l, ref.Context(), desc, raw, auth)
	if err != nil {
		return v1.Hash{}, true, err
	}
	id, _, err := e.addNames(desc.Digest, t, names)
	return id, true, err
}

// resolve fetches the manifest ref names and describes it by the digest of
// the bytes served (see servedManifest), in one bounded call to the
// registry (WithRegistryTimeout).
func (e *Embedded) resolve(ctx context.Context, p *remote.Puller, ref name.Reference) (v1.Descriptor, []byte, error) {
	call := startRegistryCall(ctx, e.opts.registryTimeout)
	desc, raw, err := servedManifest(call.ctx, p, ref)
	return desc, raw, call.end(err, ref.Context().RegistryStr())
}

// fetch stores the manifest (or index and the platform's manifest), config
// and layers of desc that are not stored yet, and returns the target.
func (e *Embedded) fetch(ctx context.Context, p *remote.Puller, l *lease, repo name.Repository,
	desc v1.Descriptor, raw []byte, auth *runtimeapi.AuthConfig) (*target, error) {
	top := desc.Digest
	l.add(top)
	topRaw, err := e.fetchManifest(ctx, p, repo, top, raw, auth)
	if err != nil {
		return nil, err
	}
	topType := mediaTypeOf(desc.MediaType, topRaw)
	manifest, manifestRaw := top, topRaw
	if topType.IsIndex() {
		child, err := choosePlatform(topRaw, e.opts.platform)
		if err != nil {
			return nil, err
		}
		l.add(child.Digest)
		stored := e.content.has(child.Digest)
		if manifestRaw, err = e.fetchManifest(ctx, p, repo, child.Digest, nil, auth); err != nil {
			return nil, err
		}
		if stored {
			if err := e.proveManifest(ctx, p, repo, child.Digest, auth); err != nil {
				return nil, err
			}
		}
		manifest = child.Digest
		if mt := mediaTypeOf(child.MediaType, manifestRaw); !mt.IsImage() {
			return nil, fmt.Errorf("%w: %s in index %s has media type %q", ErrUnsupportedManifest, manifest, top, mt)
		}
	} else if !topType.IsImage() {
		return nil, fmt.Errorf("%w: media type %q", ErrUnsupportedManifest, topType)
	}
	src := func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
		// A blob's body is bounded by its size; its pace is the pull's.
		layer, err := p.Layer(withBodyLimit(ctx, max(d.Size, 0)), repo.Digest(d.Digest.String()))
		if err != nil {
			return nil, registryFailure(err, auth)
		}
		rc, err := layer.Compressed()
		if err != nil {
			return nil, fmt.Errorf("failed to fetch blob %s: %w", d.Digest, registryFailure(err, auth))
		}
		return rc, nil
	}
	return e.storeImage(ctx, l, top, topType, int64(len(topRaw)), manifest, manifestRaw, src, e.newProver(repo, auth, src))
}

// fetchManifest returns manifest d from the content store, or stores raw
// (when the resolve step already read it) or what a GET of repo@d returns.
func (e *Embedded) fetchManifest(ctx context.Context, p *remote.Puller, repo name.Repository, d v1.Hash,
	raw []byte, auth *runtimeapi.AuthConfig) ([]byte, error) {
	if e.content.has(d) {
		return e.content.read(d)
	}
	if raw == nil {
		_, served, err := e.resolve(ctx, p, repo.Digest(d.String()))
		if err != nil {
			return nil, fmt.Errorf("failed to fetch manifest %s: %w", d, registryFailure(err, auth))
		}
		raw = served
	}
	if err := e.content.write(ctx, d, int64(len(raw)), bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	return raw, nil
}

// proveManifest makes the registry serve manifest d of a new index when
// d was already stored (fetchManifest did not ask for it): an index of the
// registry's own could name another tenant's manifest by its digest.
func (e *Embedded) proveManifest(ctx context.Context, p *remote.Puller, repo name.Repository, d v1.Hash, auth *runtimeapi.AuthConfig) error {
	if _, _, err := e.resolve(ctx, p, repo.Digest(d.String())); err != nil {
		return fmt.Errorf("failed to fetch manifest %s: %w", d, registryFailure(err, auth))
	}
	return nil
}

// mediaTypeOf is the media type the registry announced when it is a
// manifest type, else the one the manifest declares, else (OCI allows
// leaving it out) the one its shape says.
func mediaTypeOf(announced types.MediaType, raw []byte) types.MediaType {
	if announced.IsImage() || announced.IsIndex() || announced.IsSchema1() {
		return announced
	}
	var probe struct {
		MediaType types.MediaType `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
	}
	if json.Unmarshal(raw, &probe) == nil {
		switch {
		case probe.MediaType != "":
			return probe.MediaType
		case probe.Manifests != nil:
			return types.OCIImageIndex
		}
	}
	return types.OCIManifestSchema1
}

// choosePlatform picks the manifest for want from an index, as containerd
// does: the first whose platform satisfies want, else the first without a
// platform.
func choosePlatform(raw []byte, want v1.Platform) (v1.Descriptor, error) {
	idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%w: %v", ErrUnsupportedManifest, err)
	}
	var fallback *v1.Descriptor
	for i, d := range idx.Manifests {
		switch {
		case d.Platform == nil:
			if fallback == nil {
				fallback = &idx.Manifests[i]
			}
		case d.Platform.Satisfies(want):
			return d, nil
		}
	}
	if fallback != nil {
		return *fallback, nil
	}
	return v1.Descriptor{}, fmt.Errorf("%w %s", ErrNoMatchingPlatform, want.String())
}
