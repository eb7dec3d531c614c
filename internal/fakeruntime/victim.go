package fakeruntime

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/registry"
)

// Victim is what a claimed-digest attack is after: tenant A's private
// image, team-a/app:v1 in a registry of the test's, and the node's
// runtime, which holds that image (as a pull of it left it) and trusts
// the digest a registry's HEAD claims. A lying registry
// (internal/hostile) claims Pushed.Digest with MediaType.
type Victim struct {
	Registry  *registry.Registry
	Pushed    registry.Pushed
	MediaType string
	Runtime   *ClaimTrusting
}

// NewVictim starts a registry of cfg, closed when the test ends, pushes
// a small image to it as team-a/app:v1 and puts that image in a new
// ClaimTrusting runtime.
func NewVictim(t testing.TB, cfg registry.Config) *Victim {
	t.Helper()
	reg, err := registry.New(cfg, registry.WithBcryptCost(bcrypt.MinCost))
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	img, err := registry.Image(7, 1, 512)
	require.NoError(t, err)
	pushed, err := reg.Push(context.Background(), "team-a/app", "v1", img)
	require.NoError(t, err)
	mt, err := img.MediaType()
	require.NoError(t, err)
	v := &Victim{Registry: reg, Pushed: pushed, MediaType: string(mt), Runtime: &ClaimTrusting{}}
	v.Runtime.Add(&runtimeapi.Image{Id: pushed.ConfigDigest, Size: 512, RepoTags: []string{pushed.Reference}, RepoDigests: []string{pushed.DigestReference}})
	return v
}
