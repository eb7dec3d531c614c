package criproxy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criproxy"
)

// nonRoot is the USER of the images these tests pull (distroless's
// "nonroot").
const nonRoot = 65532

// TestContainerUserIsTheImages: the kubelet asks a container's user with a
// bare spec (getImageUser) and takes "absent" for root: it then sets
// runAsUser 0 for a pod without a securityContext, and refuses a
// runAsNonRoot pod. Behind serve, that look-up sees the image as the
// runtime has it, for the first pod and every later one; another tenant's
// presence check is still refused.
func TestContainerUserIsTheImages(t *testing.T) {
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(7), "alice:pw")
	h.fake.uids[id(7)] = nonRoot

	for i, how := range []string{"first pod (pulled)", "second pod (answered from its record)"} {
		p := h.newPod("a", nil)
		ref, err := p.ensure(t, image, "alice", "pw")
		require.NoError(t, err, how)
		assert.Equal(t, id(7), ref, how)
		assert.EqualValues(t, 1234, p.size(t, image), "%s: the image's size after the pull", how)
		uid := h.userLookup(t, image)
		require.NotNil(t, uid, "%s: getImageUser must not read absent (the kubelet would run it as root)", how)
		assert.EqualValues(t, nonRoot, uid.GetValue(), how)
		_, _, pulls := h.fake.counts()
		assert.Equal(t, 1, pulls, "%s: runtime pulls so far (step %d)", how, i)
	}

	b := h.newPod("b", nil)
	assert.Empty(t, b.presence(t, image), "tenant B's presence check")
	_, err := b.pullOnly(t, image, "bob", "nope")
	assert.Error(t, err, "tenant B is refused by the registry")
	assert.NotNil(t, h.userLookup(t, image), "the user look-up still reads the image")
}

// TestAlwaysPullsAskTheRegistry: the kubelet asks nothing before an Always
// pull, so serve answers a pull from a record only after that same pod's
// presence check, once. A revoked credential or a moved tag is seen by
// every Always pull, whatever other pods do meanwhile.
func TestAlwaysPullsAskTheRegistry(t *testing.T) {
	image := reg + "/team-a/app:v1"
	for _, tc := range []struct {
		name string
		// before sets the scene with the recorded image present; it
		// returns the pod whose Always pull is then counted.
		before       func(t *testing.T, h *harness) *kubeletPod
		wantManifest int
	}{
		{name: "Always container restarted", wantManifest: 1, before: func(t *testing.T, h *harness) *kubeletPod {
			p := h.newPod("a", nil)
			_, err := p.ensureAlways(t, image, "alice", "pw")
			require.NoError(t, err)
			require.NotNil(t, h.userLookup(t, image))
			return p
		}},
		{name: "an IfNotPresent pod answered, then an Always pod", wantManifest: 1, before: func(t *testing.T, h *harness) *kubeletPod {
			_, err := h.newPod("a", nil).ensure(t, image, "alice", "pw")
			require.NoError(t, err)
			return h.newPod("a", nil)
		}},
		{name: "another pod's presence check just before", wantManifest: 1, before: func(t *testing.T, h *harness) *kubeletPod {
			require.Empty(t, h.newPod("b", nil).presence(t, image)) // B's pod in back-off, asking again
			return h.newPod("a", nil)
		}},
		{name: "one pod, an IfNotPresent container then an Always one", wantManifest: 1, before: func(t *testing.T, h *harness) *kubeletPod {
			p := h.newPod("a", nil)
			_, err := p.ensure(t, image, "alice", "pw") // its window serves this pull only
			require.NoError(t, err)
			return p
		}},
		{name: "the pod's own presence check (IfNotPresent)", wantManifest: 0, before: func(t *testing.T, h *harness) *kubeletPod {
			p := h.newPod("a", nil)
			require.Empty(t, p.presence(t, image))
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.fake.publish(t, image, id(42), "alice:pw")
			_, err := h.pull(t, "a", image, "alice", "pw") // recorded
			require.NoError(t, err)
			p := tc.before(t, h)
			h.clock.Step(10 * time.Second) // back-off before the restart

			m0, _, _ := h.fake.counts()
			_, err = p.pullOnly(t, image, "alice", "pw")
			require.NoError(t, err)
			m1, _, _ := h.fake.counts()
			assert.Equal(t, tc.wantManifest, m1-m0, "registry requests of the pull")
		})
	}
}

// TestRevokedCredentialAlwaysRefused: tenant A's password changed at the
// registry (the secret did not); an Always pod of A is refused with the
// registry's 401 although A's old credential is recorded, while tenant B's
// IfNotPresent pod of the image keeps asking.
func TestRevokedCredentialAlwaysRefused(t *testing.T) {
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(9), "alice:pw")
	_, err := h.newPod("a", nil).ensure(t, image, "alice", "pw")
	require.NoError(t, err)
	h.fake.publish(t, image, id(9), "alice:new") // rotated at the registry

	b := h.newPod("b", nil)
	for range 3 {
		require.Empty(t, b.presence(t, image))
		_, err := b.pullOnly(t, image, "bob", "nope")
		require.Error(t, err)
	}
	_, err = h.newPod("a", nil).ensureAlways(t, image, "alice", "pw")
	require.Error(t, err, "the registry no longer takes A's old password")
	assert.Contains(t, err.Error(), "401")
}

// TestImageVolumeEverySync: the kubelet ensures a pod's image volumes on
// every sync (SyncPod), with the pod's presence check. After the pod's
// first pull, serve reports the image present to that pod, so the kubelet
// makes no further PullImage; another pod (a Never one included) still
// proves nothing.
func TestImageVolumeEverySync(t *testing.T) {
	image := reg + "/team-a/data:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(11), "alice:pw")
	p := h.newPod("a", nil)
	_, err := p.ensure(t, image, "alice", "pw")
	require.NoError(t, err)
	_, _, pulls := h.fake.counts()
	for range 60 { // a minute of syncs, one a second
		h.clock.Step(time.Second)
		assert.Equal(t, id(11), p.presence(t, image), "the pod's sync finds its image volume")
	}
	_, _, after := h.fake.counts()
	assert.Equal(t, pulls, after, "no pull after the first")

	never := h.newPod("a", nil)
	assert.Empty(t, never.presence(t, image), "a Never pod of tenant A shows no credential to serve: ErrImageNeverPull, a listed difference")
}

// TestImageVolumeDigest: under the kubelet's ImageVolumeWithDigest gate,
// every status update of a pod with an image volume looks the volume's
// image up by the ID the pod's pull got, with the pod's annotations
// (volumeRef), for volumeStatus.image.imageRef. The pod whose pull got
// that image is answered "present" while the records grant it the image
// (decided again with its proof, under the name it pulled); anyone else
// asking by that ID is answered "absent", as before. No look-up by ID
// opens an answer window or makes a pull.
func TestImageVolumeDigest(t *testing.T) {
	image, other := reg+"/team-a/data:v1", reg+"/team-a/other:v1"
	for _, tc := range []struct {
		name string
		cfg  harnessConfig
		// asker is the pod that looks up, and the ID it asks by, once p
		// (tenant A's) got image as ref.
		asker func(t *testing.T, h *harness, p *kubeletPod, ref string) (*kubeletPod, string)
		want  bool
	}{
		{
			name:  "the pod that pulled it",
			asker: func(_ *testing.T, _ *harness, p *kubeletPod, ref string) (*kubeletPod, string) { return p, ref },
			want:  true,
		},
		{
			name: "another pod of the same tenant",
			asker: func(_ *testing.T, h *harness, _ *kubeletPod, ref string) (*kubeletPod, string) {
				return h.newPod("a", nil), ref
			},
		},
		{
			name: "another tenant's pod with the pod's annotations copied",
			asker: func(_ *testing.T, h *harness, p *kubeletPod, ref string) (*kubeletPod, string) {
				return h.newPod("b", p.ann), ref // the kubelet's config.seen over the copied one
			},
		},
		{
			name: "the pod's annotations with another runtime handler",
			asker: func(_ *testing.T, _ *harness, p *kubeletPod, ref string) (*kubeletPod, string) {
				q := *p
				q.handler = "kata"
				return &q, ref
			},
		},
		{
			name: "the pod, by the ID of an image it did not pull",
			asker: func(t *testing.T, h *harness, p *kubeletPod, _ string) (*kubeletPod, string) {
				ref, err := h.pull(t, "a", other, "alice", "pw") // another pod of A
				require.NoError(t, err)
				return p, ref
			},
		},
		{
			name: "the pod, once the records no longer grant it the image",
			asker: func(t *testing.T, h *harness, p *kubeletPod, ref string) (*kubeletPod, string) {
				// Removed (its records pruned), then pulled again by
				// tenant C: the records hold C's credential only.
				require.NoError(t, h.client.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: ref}))
				again, err := h.pull(t, "c", image, "carol", "pw")
				require.NoError(t, err)
				require.Equal(t, ref, again)
				return p, ref
			},
		},
		{
			name: "the pod, on a node whose clock is too coarse to tell pods apart",
			cfg:  harnessConfig{serverOpts: []criproxy.Option{criproxy.WithClockStep(time.Millisecond)}},
			asker: func(_ *testing.T, _ *harness, p *kubeletPod, ref string) (*kubeletPod, string) {
				return p, ref
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg)
			h.fake.publish(t, image, id(11), "alice:pw", "carol:pw")
			h.fake.publish(t, other, id(12), "alice:pw")
			p := h.newPod("a", map[string]string{"team": "a"})
			ref, err := p.ensure(t, image, "alice", "pw")
			require.NoError(t, err)
			require.Equal(t, id(11), ref, "the ref the kubelet mounts, and later asks by")
			q, asked := tc.asker(t, h, p, ref)

			proven, hidden := decisions(t, "ImageStatus", "proven"), decisions(t, "ImageStatus", "hidden")
			windows := criproxy.OpenWindows(h.server)
			_, _, pulls := h.fake.counts()
			const syncs = 3
			for range syncs {
				h.clock.Step(5 * time.Second) // the kubelet's status updates
				got := q.volumeRef(t, asked)
				if tc.want {
					assert.Equal(t, asked, got, "volumeStatus.image.imageRef")
				} else {
					assert.Empty(t, got, "volumeStatus.image.imageRef")
				}
			}
			if tc.want {
				assert.Equal(t, float64(syncs), decisions(t, "ImageStatus", "proven")-proven, "answered from the pod's proof")
			} else {
				assert.Equal(t, float64(syncs), decisions(t, "ImageStatus", "hidden")-hidden, "reported absent")
			}
			assert.Equal(t, windows, criproxy.OpenWindows(h.server), "answer windows: a look-up by ID opens none")
			_, _, after := h.fake.counts()
			assert.Equal(t, pulls, after, "runtime pulls")
		})
	}
}

// TestProofFollowsTheRecords: a pod's proof is decided again at each of its
// presence checks: once the image is removed and another image holds the
// name, or the record is pruned, the pod proves again.
func TestProofFollowsTheRecords(t *testing.T) {
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(1), "alice:pw")
	p := h.newPod("a", nil)
	_, err := p.ensure(t, image, "alice", "pw")
	require.NoError(t, err)
	require.Equal(t, id(1), p.presence(t, image))

	// The tag moves (another pull by an Always pod of A).
	h.fake.publish(t, image, id(2), "alice:pw")
	_, err = h.newPod("a", nil).ensureAlways(t, image, "alice", "pw")
	require.NoError(t, err)
	assert.Empty(t, p.presence(t, image), "the pod proved id(1), not id(2)")

	// Removed: its records are pruned; the pod's proof grants nothing.
	require.NoError(t, h.client.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: id(2)}))
	require.NoError(t, h.client.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: id(1)}))
	h.fake.preload(t, id(2), image) // side-loaded again, no record of A
	h.fake.mu.Lock()
	h.fake.images[id(2)].RepoTags = []string{norm(t, image)}
	h.fake.mu.Unlock()
	q := h.newPod("a", nil)
	_, err = q.ensure(t, image, "alice", "pw")
	require.NoError(t, err)
	assert.Equal(t, id(2), q.presence(t, image))
}

// TestCopiedAnnotationsGainNothing: a tenant writes its pod's annotations
// but the kubelet sets config.source and config.seen over them; a pod that
// copies another pod's annotations, a config.seen of its own making
// included, is still another pod.
func TestCopiedAnnotationsGainNothing(t *testing.T) {
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(5), "alice:pw")
	a := h.newPod("a", map[string]string{"team": "a"})
	_, err := a.ensure(t, image, "alice", "pw")
	require.NoError(t, err)
	require.Equal(t, id(5), a.presence(t, image))

	copied := map[string]string{}
	for k, v := range a.ann {
		copied[k] = v
	}
	copied["kubernetes.io/config.seen"] = "2026-01-01T00:00:00Z" // made up; the kubelet overwrites it
	b := h.newPod("b", copied)
	assert.NotEqual(t, a.ann["kubernetes.io/config.seen"], b.ann["kubernetes.io/config.seen"])
	assert.Empty(t, b.presence(t, image), "B's pod is not A's")
	_, err = b.pullOnly(t, image, "bob", "nope")
	assert.Error(t, err)
	_, err = b.pullOnly(t, image, "", "")
	assert.Error(t, err, "anonymous")
	assert.Empty(t, b.presence(t, image), "a refused pull proves nothing")

	// Another runtime handler is another pod's call.
	a2 := *a
	a2.handler = "kata"
	assert.Empty(t, a2.presence(t, image))
}

// TestPresenceCheckWithoutKubeletAnnotations: a client that sends no
// annotation (crictl, a kubelet that sends none) is answered per image
// name, as before: hidden, and its pull after that answer served from a
// record; annotations without the kubelet's two, or hostile ones (huge),
// are such a call too and are never logged whole.
func TestPresenceCheckWithoutKubeletAnnotations(t *testing.T) {
	image := reg + "/team-a/app:v1"
	huge := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name string
		spec func() *runtimeapi.ImageSpec
	}{
		{"bare", func() *runtimeapi.ImageSpec { return &runtimeapi.ImageSpec{Image: image} }},
		{"other annotations", func() *runtimeapi.ImageSpec {
			return &runtimeapi.ImageSpec{Image: image, Annotations: map[string]string{"team": "a"}}
		}},
		{"huge config.seen", func() *runtimeapi.ImageSpec {
			return &runtimeapi.ImageSpec{Image: image, Annotations: map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": huge}}
		}},
		{"huge runtime handler", func() *runtimeapi.ImageSpec {
			return &runtimeapi.ImageSpec{Image: image, RuntimeHandler: huge, Annotations: map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "x"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.fake.publish(t, image, id(3), "alice:pw")
			_, err := h.client.PullImage(context.Background(), tc.spec(), creds("alice", "pw"), pod("a", "p"))
			require.NoError(t, err)

			resp, err := h.client.ImageStatus(context.Background(), tc.spec(), false)
			require.NoError(t, err)
			assert.Nil(t, resp.GetImage(), "hidden")
			m0, _, _ := h.fake.counts()
			_, err = h.client.PullImage(context.Background(), tc.spec(), creds("alice", "pw"), pod("a", "p"))
			require.NoError(t, err)
			_, err = h.client.PullImage(context.Background(), tc.spec(), creds("bob", "nope"), pod("b", "p"))
			require.Error(t, err)
			m1, _, _ := h.fake.counts()
			assert.Equal(t, 1, m1-m0, "A answered from the record, B's pull asked the registry")
		})
	}
}

// TestKubeletCallsInterleaved runs 48 pods of four tenants at once (under
// -race), each making exactly the kubelet's calls for an IfNotPresent
// container, three times (restarts): the annotated presence check, the
// annotated PullImage and size look-up, the bare user look-up. Whatever
// the interleaving: a tenant without access never gets the image, not by
// copying another pod's annotations either; the others always do; no
// user look-up of a present image reads absent; a pod with nothing to show
// never sees a credential-pulled image.
func TestKubeletCallsInterleaved(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	const images = 4
	for i := range images {
		h.fake.publish(t, fmt.Sprintf("%s/team-a/app%d:v1", reg, i), id(100+i), "alice:pw", "carol:pw")
		h.fake.uids[id(100+i)] = nonRoot
	}
	type who struct{ ns, user, pw string }
	tenants := []who{{"a", "alice", "pw"}, {"b", "bob", "nope"}, {"c", "carol", "pw"}, {"d", "", ""}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var copyFrom []map[string]string // annotations of pods that got an image
	errs := make(chan error, 1024)
	for n := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := tenants[n%len(tenants)]
			image := fmt.Sprintf("%s/team-a/app%d:v1", reg, n%images)
			var extra map[string]string
			if w.user == "bob" || w.user == "" {
				mu.Lock()
				if len(copyFrom) > 0 {
					extra = copyFrom[n%len(copyFrom)]
				}
				mu.Unlock()
			}
			p := h.newPod(w.ns, extra)
			if p.presence(t, image) != "" && w.user != "alice" && w.user != "carol" {
				errs <- fmt.Errorf("pod %d of %s: %s reported present", n, w.ns, image)
			}
			for range 3 {
				ref, err := p.ensure(t, image, w.user, w.pw)
				switch {
				case (w.user == "bob" || w.user == "") && err == nil:
					errs <- fmt.Errorf("pod %d of %s got %s (%s)", n, w.ns, image, ref)
				case (w.user == "alice" || w.user == "carol") && err != nil:
					errs <- fmt.Errorf("pod %d of %s refused: %w", n, w.ns, err)
				case err == nil:
					if uid := h.userLookup(t, image); uid.GetValue() != nonRoot {
						errs <- fmt.Errorf("pod %d: the user look-up of %s read %v", n, image, uid)
					}
					mu.Lock()
					copyFrom = append(copyFrom, p.ann)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Zero(t, h.tracker.Status().Intents, "every intent is resolved")
	for i := range images {
		assert.False(t, h.present(t, fmt.Sprintf("%s/team-a/app%d:v1", reg, i)), "a new pod with nothing to show")
	}
}

// TestAnswerWindowPerPod: a pod's window expires, and serves one pull.
func TestAnswerWindowPerPod(t *testing.T) {
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(4), "alice:pw")
	_, err := h.pull(t, "a", image, "alice", "pw")
	require.NoError(t, err)

	p := h.newPod("a", nil)
	require.Empty(t, p.presence(t, image))
	h.clock.Step(criproxy.DefaultAnswerWindow + time.Second)
	m0, _, _ := h.fake.counts()
	_, err = p.pullOnly(t, image, "alice", "pw")
	require.NoError(t, err)
	m1, _, _ := h.fake.counts()
	assert.Equal(t, 1, m1-m0, "an expired window: the registry is asked")
	assert.Equal(t, codes.OK, status.Code(err))
}
