package criruntime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// proofBytes is how much of a stored layer a registry must serve to show
// it holds the layer.
const proofBytes = 64

// blobProof checks that the registry holds a blob the content store
// already has.
type blobProof func(ctx context.Context, d v1.Descriptor) error

// prover makes a registry prove it holds the stored blobs a new manifest
// names. Digests are not secret: without the proof, a registry could serve
// a manifest of its own naming another tenant's config and layers, and
// the pull would use them without the registry serving a byte of them.
// A config (small) is fetched whole and hashed; a layer is asked for a
// random range of proofBytes, compared with the stored bytes (a registry
// that ignores Range serves the whole layer, which is hashed).
type prover struct {
	e    *Embedded
	repo name.Repository
	auth *runtimeapi.AuthConfig
	src  blobSource

	once   sync.Once
	client *http.Client
	err    error
}

func (e *Embedded) newProver(repo name.Repository, auth *runtimeapi.AuthConfig, src blobSource) *prover {
	return &prover{e: e, repo: repo, auth: auth, src: src}
}

// prove makes the registry prove it holds stored blob d (a config when
// config is set), in one bounded call to it (WithRegistryTimeout).
func (p *prover) prove(ctx context.Context, d v1.Descriptor, config bool) error {
	call := startRegistryCall(ctx, p.e.opts.registryTimeout)
	var err error
	if config {
		err = p.proveWhole(call.ctx, d)
	} else {
		err = p.proveRange(call.ctx, d)
	}
	if err = call.end(err, p.repo.RegistryStr()); errors.Is(err, ErrRegistryTimeout) {
		return fmt.Errorf("failed to fetch blob %s: %w", d.Digest, err)
	}
	return err
}

// proveWhole fetches blob d and checks it hashes to d.
func (p *prover) proveWhole(ctx context.Context, d v1.Descriptor) error {
	rc, err := p.src(ctx, d)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(rc, maxMetadataBlob+1))
	if err != nil {
		return fmt.Errorf("failed to fetch blob %s: %w", d.Digest, registryFailure(err, p.auth))
	}
	if err := checkBlob(d.Digest, -1, n, h); err != nil {
		return fmt.Errorf("the registry did not serve blob %s its manifest names: %w", d.Digest, err)
	}
	return nil
}

// proveRange asks for a random range of stored layer d and compares it.
func (p *prover) proveRange(ctx context.Context, d v1.Descriptor) error {
	f, err := os.Open(p.e.content.path(d.Digest))
	if err != nil {
		return fmt.Errorf("failed to open blob %s: %w", d.Digest, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	size := info.Size()
	if size == 0 {
		return nil // an empty blob holds nothing to protect
	}
	off := rand.Int64N(size)
	n := min(int64(proofBytes), size-off)
	want := make([]byte, n)
	if _, err := f.ReadAt(want, off); err != nil {
		return fmt.Errorf("failed to read blob %s: %w", d.Digest, err)
	}

	p.once.Do(func() {
		var rt http.RoundTripper
		rt, p.err = transport.NewWithContext(ctx, p.repo.Registry, authenticator(p.auth),
			newChallengeTransport(p.e.opts.transport, p.repo.RegistryStr(), p.auth), []string{p.repo.Scope(transport.PullScope)})
		p.client = &http.Client{Transport: rt}
	})
	if p.err != nil {
		return fmt.Errorf("failed to reach the registry: %w", registryFailure(p.err, p.auth))
	}
	u := fmt.Sprintf("%s://%s/v2/%s/blobs/%s", p.repo.Registry.Scheme(), p.repo.RegistryStr(), p.repo.RepositoryStr(), d.Digest)
	// A registry that ignores Range serves the whole layer.
	req, err := http.NewRequestWithContext(withBodyLimit(ctx, size), http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("failed to fetch blob %s: %w", d.Digest, registryFailure(err, p.auth))
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		got, err := io.ReadAll(io.LimitReader(resp.Body, n+1))
		if err != nil {
			return fmt.Errorf("failed to fetch blob %s: %w", d.Digest, registryFailure(err, p.auth))
		}
		if !bytes.Equal(got, want) || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, size) {
			return fmt.Errorf("%w: the registry did not serve blob %s its manifest names", ErrDigestMismatch, d.Digest)
		}
		return nil
	case http.StatusOK:
		h := sha256.New()
		if _, err := io.Copy(h, io.LimitReader(resp.Body, size+1)); err != nil {
			return fmt.Errorf("failed to fetch blob %s: %w", d.Digest, registryFailure(err, p.auth))
		}
		if hex.EncodeToString(h.Sum(nil)) != d.Digest.Hex {
			return fmt.Errorf("%w: the registry did not serve blob %s its manifest names", ErrDigestMismatch, d.Digest)
		}
		return nil
	default:
		return fmt.Errorf("failed to fetch blob %s: %w", d.Digest, registryFailure(checkStatus(resp, http.StatusOK, http.StatusPartialContent), p.auth))
	}
}
