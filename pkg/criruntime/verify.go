package criruntime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/log"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/boundedread"
)

// servedManifest GETs the manifest ref names and returns its descriptor,
// with the digest computed here over the bytes the registry served. A
// Docker-Content-Digest header is never trusted: go-containerregistry takes
// it as the digest of a manifest served as signed schema 1, and a registry
// can claim any digest in it. A digest reference must match the bytes. The
// manifest may be up to maxManifest bytes.
func servedManifest(ctx context.Context, p *remote.Puller, ref name.Reference) (v1.Descriptor, []byte, error) {
	rd, err := p.Get(withBodyLimit(ctx, maxManifest), ref)
	if err != nil {
		// go-containerregistry checks a digest reference itself, with an
		// error of no type of its own.
		if _, byDigest := ref.(name.Digest); byDigest && strings.Contains(err.Error(), "does not match requested digest") {
			return v1.Descriptor{}, nil, fmt.Errorf("%w: the registry served other bytes for %s", ErrDigestMismatch, ref.Identifier())
		}
		if errors.Is(err, boundedread.ErrTooLarge) {
			return v1.Descriptor{}, nil, fmt.Errorf("%w: the manifest of %s is larger than %d bytes", ErrUnsupportedManifest, ref.Context().RegistryStr(), maxManifest)
		}
		return v1.Descriptor{}, nil, err
	}
	desc := rd.Descriptor
	desc.Digest = sha256Of(rd.Manifest)
	desc.Size = int64(len(rd.Manifest))
	if d, ok := ref.(name.Digest); ok && d.DigestStr() != desc.Digest.String() {
		return v1.Descriptor{}, nil, fmt.Errorf("%w: the registry served a manifest with digest %s for %s", ErrDigestMismatch, desc.Digest, d.DigestStr())
	}
	return desc, rd.Manifest, nil
}

func sha256Of(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// VerifyManifest proves that the registry serves image's manifest to auth:
// it GETs the manifest the reference names, as containerd's CRI plugin
// reaches the registry (see WithRegistryConfigPath: the hosts of the
// name's registry in containerd's order, mirrors first, each with its own
// TLS settings, auth presented to each as containerd presents it, on the
// request's own 401 challenge), and hashes the bytes itself. The first
// host that serves the manifest decides; a host that fails (refused, not
// found, unreachable) passes to the next, as in containerd. It returns the
// digest of the bytes served. When expected is not empty, that digest
// must be one of expected, else the error wraps ErrDigestMismatch; a
// digest reference must match the bytes in any case. A HEAD is never
// sent, so a Docker-Content-Digest claim proves nothing. Registry errors
// are scrubbed of auth's secrets, as a pull's are.
//
// A runtime that trusts a registry's Docker-Content-Digest header (a HEAD)
// records a name for content it already holds without the registry having
// served a byte; calling VerifyManifest after such a runtime's pull, with
// the digests the runtime resolved as expected, closes that gap.
//
// The whole call is bounded: its requests end by the registry timeout
// (WithRegistryTimeout) or ctx's deadline, whichever comes first, a
// manifest is at most containerd's MaxManifestSize, every other answer
// and header is small, and redirects are few. A registry that does not
// answer in time fails it with an error wrapping ErrRegistryTimeout and
// context.DeadlineExceeded that names the host (the last one tried) and
// the image (a cancelled ctx's error is returned as it is); a refusal
// keeps the registry's
// status (StatusCode, ErrUnauthorized, ErrNotFound). Only the registry
// config path, registry timeout and user agent options are used.
func VerifyManifest(ctx context.Context, image string, auth *runtimeapi.AuthConfig, expected []string, opts ...Option) (string, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	ref, err := parseReference(image)
	if err != nil {
		return "", err
	}
	host, repo, object, byDigest, err := splitName(image)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("failed to verify the manifest of %q: %w", canonicalName(ref), registryFailure(err, auth))
	}
	call := startRegistryCall(ctx, o.registryTimeout)
	got, tried, err := verifyAtHosts(call.ctx, canonicalName(ref), host, repo, object, byDigest, auth, expected, o)
	if err = call.end(err, tried); err != nil {
		if errors.Is(err, ErrDigestMismatch) {
			return got, err
		}
		return fail(err)
	}
	return got, nil
}

// verifyAtHosts is VerifyManifest's work for image at the hosts of its
// registry host, in containerd's order; tried is the last host asked.
func verifyAtHosts(ctx context.Context, image, host, repo, object string, byDigest bool, auth *runtimeapi.AuthConfig,
	expected []string, o options) (got, tried string, err error) {
	hosts, release, err := registryHosts(ctx, o.registryConfigPath, host, auth, o.registryTimeout)
	defer release()
	if err != nil {
		return "", host, fmt.Errorf("failed to read the registry hosts configuration of %s: %w", host, err)
	}
	caps := docker.HostCapabilityPull
	if !byDigest {
		caps |= docker.HostCapabilityResolve
	}
	ctx = log.WithLogger(docker.ContextWithAppendPullRepositoryScope(ctx, repo), containerdLog)
	var capable []docker.RegistryHost
	for _, h := range hosts {
		if h.Capabilities.Has(caps) {
			capable = append(capable, h)
		}
	}
	var errs []error
	tried = host
	for i, h := range capable {
		tried = h.Host
		m := getManifest(ctx, h, host, repo, object, o.userAgent, len(capable)-i)
		if m.err != nil {
			errs = append(errs, m.err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		got := sha256Of(m.body).String()
		if byDigest && got != object {
			return "", tried, fmt.Errorf("%w: %s served a manifest with digest %s for %s", ErrDigestMismatch, h.Host, got, object)
		}
		if len(expected) > 0 && !slices.Contains(expected, got) {
			return got, tried, fmt.Errorf("%w: %s served %q a manifest with digest %s, the runtime resolved %v",
				ErrDigestMismatch, h.Host, image, got, expected)
		}
		return got, tried, nil
	}
	if len(errs) == 0 {
		return "", tried, fmt.Errorf("no host of %s is configured to serve %s", host, object)
	}
	return "", tried, mostRelevant(errs)
}

// mostRelevant is the failure of a verification that every host failed,
// chosen as containerd's resolver chooses the error of a pull: the one
// that got furthest, a host's answer (401, 403, 5xx) over a 404 over a
// host that could not be reached or authorized; the first of those. So a
// mirror's refusal is the answer, not an upstream that does not resolve,
// as for containerd's pull through the same hosts.
func mostRelevant(errs []error) error {
	best, rank := errs[0], -1
	for _, err := range errs {
		r := 1
		var te *transport.Error
		if errors.As(err, &te) {
			r = 3
			if te.StatusCode == http.StatusNotFound {
				r = 2
			}
		}
		if r > rank {
			best, rank = err, r
		}
	}
	return best
}
