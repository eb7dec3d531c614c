package pulltest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// registry is a guardedpull.Verifier over a model registry that serves
// Image's manifest to User: honest, or lying (it serves other bytes than
// those whose digest the runtime resolved, and its error echoes the
// Authorization header it was sent), or refusing every credential. A
// refusal wraps criruntime.ErrUnauthorized, as criruntime.VerifyManifest's
// does.
type registry struct{ lying, refusing bool }

var _ guardedpull.Verifier = registry{}

func (r registry) VerifyManifest(_ context.Context, image string, auth *runtimeapi.AuthConfig, expected []string) (string, error) {
	if r.refusing || auth.GetUsername() != User || auth.GetPassword() != Password {
		return "", fmt.Errorf("failed to verify the manifest of %q: %w: 401 Unauthorized", image, criruntime.ErrUnauthorized)
	}
	served := manifest
	if r.lying {
		served = append([]byte(`{"lie":1}`), manifest...)
	}
	sum := sha256.Sum256(served)
	got := "sha256:" + hex.EncodeToString(sum[:])
	if len(expected) > 0 && !slices.Contains(expected, got) {
		return got, fmt.Errorf("digest mismatch: the registry served %q a manifest with digest %s, the runtime resolved %v (request: Authorization: Basic %s)",
			image, got, expected, base64.StdEncoding.EncodeToString([]byte(auth.GetUsername()+":"+auth.GetPassword())))
	}
	return got, nil
}
