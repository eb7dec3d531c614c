package imagemanager_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/internal/hostile"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/registry"
)

// headTrustingRuntime resolves a reference as containerd 1.6 does: a HEAD
// of the manifest with the pull's credentials, and when the digest in the
// answer's Docker-Content-Digest names content it holds, it records the
// name without fetching anything.
type headTrustingRuntime struct {
	fakeRuntime
	mu     sync.Mutex
	images map[string]*runtimeapi.Image // by name
}

func (r *headTrustingRuntime) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, img := range r.images {
		if n == spec.Image || img.Id == spec.Image {
			return &runtimeapi.ImageStatusResponse{Image: img}, nil
		}
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (r *headTrustingRuntime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runtimeapi.Image
	for _, img := range r.images {
		out = append(out, img)
	}
	return out, nil
}

func (r *headTrustingRuntime) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	ref, err := name.ParseReference(spec.Image, name.Insecure)
	if err != nil {
		return "", err
	}
	var a authn.Authenticator = authn.Anonymous
	if auth != nil {
		a = &authn.Basic{Username: auth.Username, Password: auth.Password}
	}
	desc, err := remote.Head(ref, remote.WithAuth(a), remote.WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("failed to resolve reference %q: %w", spec.Image, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, img := range r.images {
		for _, rd := range img.RepoDigests {
			if strings.HasSuffix(rd, "@"+desc.Digest.String()) {
				named := &runtimeapi.Image{Id: img.Id, Size: img.Size,
					RepoTags:    append([]string{spec.Image}, img.RepoTags...),
					RepoDigests: append([]string{ref.Context().Name() + "@" + desc.Digest.String()}, img.RepoDigests...)}
				r.images[spec.Image] = named
				for n, other := range r.images {
					if other.Id == img.Id {
						r.images[n] = named
					}
				}
				return img.Id, nil
			}
		}
	}
	return "", fmt.Errorf("failed to pull %q: this test runtime only names content it holds", spec.Image)
}

// TestRegistryThatOnlyClaimsADigest: on a runtime that trusts the digest
// header, a tenant's registry that claims tenant A's manifest digest for
// evil/app:v1 gets tenant A's image named, but pullguard checks the bytes
// and refuses: the pod fails, nothing is recorded, and a Never pod of a
// third tenant naming evil/app:v1 stays refused. Without the check the
// attack works, which shows the test can see it.
func TestRegistryThatOnlyClaimsADigest(t *testing.T) {
	for _, mode := range []hostile.Mode{hostile.NoBytes, hostile.OtherBytes, hostile.OtherBytesSchema1} {
		for _, verify := range []bool{true, false} {
			t.Run(fmt.Sprintf("mode %d, verify %t", mode, verify), func(t *testing.T) {
				ctx := context.Background()
				reg, err := registry.New(registry.Config{
					Users:        []registry.User{{Name: "alice", Password: passwords["alice"]}},
					Repositories: []registry.Repository{{Name: "team-a/app", Readers: []string{"alice"}}},
				}, registry.WithBcryptCost(bcrypt.MinCost))
				require.NoError(t, err)
				t.Cleanup(func() { _ = reg.Close() })
				img, err := registry.Image(7, 1, 512)
				require.NoError(t, err)
				pushed, err := reg.Push(ctx, "team-a/app", "v1", img)
				require.NoError(t, err)
				mt, err := img.MediaType()
				require.NoError(t, err)
				liar, err := hostile.Start(pushed.Digest, string(mt), mode)
				require.NoError(t, err)
				t.Cleanup(liar.Close)
				evil := liar.Host + "/evil/app:v1"

				rt := &headTrustingRuntime{images: map[string]*runtimeapi.Image{}}
				rt.images[pushed.Reference] = &runtimeapi.Image{Id: pushed.ConfigDigest, RepoTags: []string{pushed.Reference}, RepoDigests: []string{pushed.DigestReference}}
				dir := t.TempDir()
				tr, err := credtracker.New(ctx, credtracker.Config{Dir: dir}, guardedpull.Inventory(rt))
				require.NoError(t, err)
				t.Cleanup(func() { _ = tr.Close() })
				opts := []imagemanager.Option{imagemanager.WithLogger(ktesting.NewLogger(t, ktesting.NewConfig()))}
				if verify {
					opts = append(opts, imagemanager.WithManifestVerification(guardedpull.RegistryVerifier()))
				}
				e := &env{t: t, tr: tr, rec: record.NewFakeRecorder(1000)}
				e.m, err = imagemanager.New(rt, tr, e.rec, opts...)
				require.NoError(t, err)

				res, err := e.ensure(pod("team-a", "app", "regcred"), pushed.Reference, corev1.PullIfNotPresent, registrySecret("team-a", "regcred", reg.Host(), "alice"))
				require.NoError(t, err, res.Message)
				liarGot := len(liar.Requests())

				res, err = e.ensure(pod("team-b", "evil"), evil, corev1.PullIfNotPresent)
				next, nerr := e.ensure(pod("team-c", "victim"), evil, corev1.PullNever)
				t.Logf("the liar's log:\n%s", liar.Log())
				if !verify {
					assert.NoError(t, err, "without the check the claimed digest mints the image")
					return
				}
				require.ErrorIs(t, err, imagemanager.ErrImagePull, res.Message)
				assert.Empty(t, res.ImageRef)
				assert.Contains(t, res.Message, evil)
				require.ErrorIs(t, nerr, imagemanager.ErrImageNeverPull, "nothing was recorded as node-accessible: %s (%s)", next.Message, next.Decision.Reason)
				for _, rec := range tr.Records() {
					for repo := range rec.Repositories {
						assert.NotContains(t, repo, "evil/app", "no record names the liar's image")
					}
				}
				var gets int
				for _, r := range liar.Requests()[liarGot:] {
					if r.Method == "GET" && strings.Contains(r.Path, "/manifests/") {
						gets++
					}
				}
				assert.Positive(t, gets, "pullguard asked the liar for the bytes")
				e.events()

				// After a restart the name still requires verification.
				require.NoError(t, tr.Close())
				tr, err = credtracker.New(ctx, credtracker.Config{Dir: dir}, guardedpull.Inventory(rt))
				require.NoError(t, err)
				t.Cleanup(func() { _ = tr.Close() })
				d := tr.Decide(credtracker.Request{Image: evil, PullPolicy: corev1.PullNever, ImageRef: pushed.ConfigDigest, Names: []string{evil}})
				assert.Equal(t, credtracker.FailNeverPull, d.Action, "after a restart: %s", d.Reason)
			})
		}
	}
}
