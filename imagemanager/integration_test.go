package imagemanager_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/registry"
)

// TestMultiTenantStory runs the design's story on the embedded registry
// (per-repository access, Basic auth, request accounting) and the embedded
// runtime (which re-pulls a present image by fetching its manifest only).
func TestMultiTenantStory(t *testing.T) {
	ctx := context.Background()
	reg, err := registry.New(registry.Config{
		Users: []registry.User{{Name: "alice", Password: passwords["alice"]}, {Name: "bob", Password: passwords["bob"]}, {Name: "carol", Password: passwords["carol"]}},
		Repositories: []registry.Repository{
			{Name: "team-a/app", Readers: []string{"alice", "carol"}},
			{Name: "public/*", Public: true},
		},
	}, registry.WithBcryptCost(bcrypt.MinCost))
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	img, err := registry.Image(1, 2, 4096)
	require.NoError(t, err)
	pushed, err := reg.Push(ctx, "team-a/app", "v1", img)
	require.NoError(t, err)
	image := pushed.Reference

	rt, err := criruntime.NewEmbedded(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close(ctx) })
	tr, err := credtracker.New(ctx, credtracker.Config{Dir: t.TempDir()}, guardedpull.Inventory(rt))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	e := &env{t: t, tr: tr, rec: record.NewFakeRecorder(1000)}
	e.m, err = imagemanager.New(rt, tr, e.rec, imagemanager.WithLogger(ktesting.NewLogger(t, ktesting.NewConfig())))
	require.NoError(t, err)

	secretFor := func(ns, user string) *corev1.Secret { return registrySecret(ns, "regcred", reg.Host(), user) }
	manifests := func() int { return reg.Count(registry.Filter{Kind: registry.KindManifest}) }
	blobs := func() int { return reg.Count(registry.Filter{Kind: registry.KindBlob}) }

	// Tenant A pulls its private image with its secret.
	res, err := e.ensure(pod("team-a", "app-1", "regcred"), image, corev1.PullIfNotPresent, secretFor("team-a", "alice"))
	require.NoError(t, err, res.Message)
	assert.True(t, res.Pulled)
	assert.Equal(t, pushed.ConfigDigest, res.ImageRef)
	assert.Positive(t, blobs(), "the first pull downloads the layers")
	e.events()

	// Tenant B, no credentials: refused by the registry with a 401.
	reg.Reset()
	res, err = e.ensure(pod("team-b", "intruder"), image, corev1.PullIfNotPresent)
	require.ErrorIs(t, err, imagemanager.ErrImagePull)
	assert.Contains(t, res.Message, "401")
	evs := e.events()
	require.Len(t, evs, 2)
	assert.Equal(t, event{"Warning", "Failed", res.Message}, evs[1])
	assert.Zero(t, blobs(), "a refused verification downloads nothing")

	// Tenant B with bob's valid credentials for other repositories: refused too.
	res, err = e.ensure(pod("team-b", "intruder-2", "regcred"), image, corev1.PullIfNotPresent, secretFor("team-b", "bob"))
	require.ErrorIs(t, err, imagemanager.ErrImagePull)
	assert.Contains(t, res.Message, "401")

	// Tenant B with Never: the absent image's message.
	reg.Reset()
	res, err = e.ensure(pod("team-b", "intruder-3"), image, corev1.PullNever)
	require.ErrorIs(t, err, imagemanager.ErrImageNeverPull)
	assert.Equal(t, `Container image "`+image+`" is not present with pull policy of Never`, res.Message)
	assert.Zero(t, len(reg.Requests()), "no registry contact")

	// Tenant B by the image's ID, which the runtime resolves: refused too.
	res, err = e.ensure(pod("team-b", "by-id"), pushed.ConfigDigest, corev1.PullNever)
	require.ErrorIs(t, err, imagemanager.ErrImageNeverPull, res.Message)
	assert.Equal(t, credtracker.ReasonUnlistedName, res.Decision.Reason)

	// Tenant A's second pod: no registry request at all.
	res, err = e.ensure(pod("team-a", "app-2", "regcred"), image, corev1.PullIfNotPresent, secretFor("team-a", "alice"))
	require.NoError(t, err, res.Message)
	assert.False(t, res.Pulled)
	assert.Zero(t, len(reg.Requests()))

	// Tenant C, its own valid credentials: verified by manifest requests
	// only, with no blob downloaded.
	res, err = e.ensure(pod("team-c", "app", "regcred"), image, corev1.PullIfNotPresent, secretFor("team-c", "carol"))
	require.NoError(t, err, res.Message)
	assert.True(t, res.Pulled)
	assert.Equal(t, 1, reg.Count(registry.Filter{Kind: registry.KindManifest, User: "carol", Status: 200}), "one successful manifest request")
	assert.Zero(t, blobs())
	t.Logf("tenant C's verification: %d manifest requests in all (challenges included), %d blob requests", manifests(), blobs())
	for _, ev := range e.events() {
		for _, pw := range passwords {
			assert.NotContains(t, ev.Message, pw)
		}
	}
}
