package imagemanager_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/internal/fakeruntime"
	"github.com/pullguard/pullguard/internal/hostile"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/registry"
)

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
				// A runtime that trusts the registry's HEAD, as containerd
				// 1.6, holds tenant A's image.
				victim := fakeruntime.NewVictim(t, registry.Config{
					Users:        []registry.User{{Name: "alice", Password: passwords["alice"]}},
					Repositories: []registry.Repository{{Name: "team-a/app", Readers: []string{"alice"}}},
				})
				reg, pushed, rt := victim.Registry, victim.Pushed, victim.Runtime
				liar, err := hostile.Start(pushed.Digest, victim.MediaType, mode)
				require.NoError(t, err)
				t.Cleanup(liar.Close)
				evil := liar.Host + "/evil/app:v1"
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
