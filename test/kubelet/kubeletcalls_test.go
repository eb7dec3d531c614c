package kubelet

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The scenarios of this file follow each kind of call the kubelet makes
// to the image service (see pkg/criproxy/kubeletcalls_test.go, their unit
// version): the bare look-up of a container's user, an Always pull, a
// presence check while another pull is in flight, and the presence check
// of an image volume at every sync.

// imageUser: the kubelet reads a container's user with a bare ImageStatus
// (getImageUser) and takes an absent image for root. An image whose
// config says USER 65532, pulled with tenant A's secret, must run as that
// user for every pod of A: a runAsNonRoot pod (the first, which pulls,
// and a second one) and a pod with no securityContext, whose process
// containerd runs as uid 65532. Tenant B is still refused.
func imageUser(t *testing.T, w *world) {
	img, a, b := w.img, w.a, w.b
	t.Run("runAsNonRoot, the first pod", func(t *testing.T) {
		from := w.mark(t)
		w.runs(t, runAsNonRoot(pod(a.ns, "nonroot-1", img.nonRoot, ifNotPresent, withSecret)))
		tr := w.since(t, from, "team-a/nonroot")
		assert.Positive(t, tr.blobs, "the first pod pulls the layers")
		assert.EqualValues(t, imageUID, w.processUID(t, a.ns, "nonroot-1"))
		// The puller's size look-up right after the pull (GetImageSize)
		// sees the image: a hidden one reads "Image size: 0 bytes".
		_, err := w.c.awaitEventMatching(w.ctx, a.ns, "nonroot-1", "Pulled", regexp.MustCompile(`Image size: [1-9][0-9]* bytes`))
		assert.NoError(t, err, "the Pulled event gives the image's size")
	})
	t.Run("runAsNonRoot, a second pod", func(t *testing.T) {
		w.freeRun(t, runAsNonRoot(pod(a.ns, "nonroot-2", img.nonRoot, ifNotPresent, withSecret)))
		assert.EqualValues(t, imageUID, w.processUID(t, a.ns, "nonroot-2"))
	})
	t.Run("no securityContext runs as the image's user", func(t *testing.T) {
		w.freeRun(t, pod(a.ns, "nonroot-default", img.nonRoot, ifNotPresent, withSecret))
		assert.EqualValues(t, imageUID, w.processUID(t, a.ns, "nonroot-default"), "the uid containerd runs the process as (0 if the kubelet's look-up had read the image as absent)")
	})
	t.Run("tenant B is still refused", func(t *testing.T) {
		w.refused(t, pod(b.ns, "nonroot-intruder", img.nonRoot, ifNotPresent, withSecret), "team-a/nonroot", false)
	})
}

// volumeImageRef is volumeStatus.image.imageRef of the pod's volume
// as a container of the pod reports it ("" if the kubelet has not set it).
func (c *cluster) volumeImageRef(ctx context.Context, ns, name, volume string) (string, error) {
	p, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, cs := range p.Status.ContainerStatuses {
		for _, vm := range cs.VolumeMounts {
			if vm.Name == volume && vm.VolumeStatus != nil && vm.VolumeStatus.Image != nil {
				return vm.VolumeStatus.Image.ImageRef, nil
			}
		}
	}
	return "", nil
}

// processUID is the uid containerd runs the pod's container as.
func (w *world) processUID(t *testing.T, ns, name string) uint32 {
	return w.runtimeSpec(t, ns, name).Process.User.UID
}

// volumeFile reads, on the host, file in the source of the pod's
// container's mount at dest.
func (w *world) volumeFile(t *testing.T, ns, name, dest, file string) string {
	for _, mnt := range w.runtimeSpec(t, ns, name).Mounts {
		if mnt.Destination == dest {
			b, err := os.ReadFile(filepath.Join(mnt.Source, file))
			require.NoError(t, err)
			return string(b)
		}
	}
	require.FailNow(t, "no mount", "the container of %s/%s has no mount at %s", ns, name, dest)
	return ""
}

// runtimeSpec is the OCI spec containerd made for the pod's container.
func (w *world) runtimeSpec(t *testing.T, ns, name string) *runtimeSpec {
	id, err := w.c.containerID(w.ctx, ns, name)
	require.NoError(t, err)
	spec, err := w.c.ctrd.runtimeSpec(w.ctx, id)
	require.NoError(t, err)
	return spec
}

// presentWhilePulling: a Never pod of a preloaded public image
// (shared/tool:v1) runs while another tenant's pull of another tag of the
// same repository (shared/tool:v2) is in flight: the registry holds that
// manifest request until the pod ran.
func presentWhilePulling(t *testing.T, w *world) {
	ctx, c, img, b, tc := w.ctx, w.c, w.img, w.b, w.tc
	arrived, release := c.reg.hold("/v2/shared/tool/manifests/v2")
	defer release()
	w.create(t, pod(b.ns, "tool-v2", img.toolV2, ifNotPresent, noSecret))
	defer func() {
		release() // first: the pod's worker waits for its pull
		assert.NoError(t, c.remove(ctx, b.ns, "tool-v2"))
	}()
	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	select {
	case <-arrived:
	case <-wait.Done():
		require.FailNow(t, "the pull of shared/tool:v2 never reached the registry")
	}
	_, err := c.awaitEvent(ctx, b.ns, "tool-v2", "Pulling", img.toolV2)
	assert.NoError(t, err)

	w.freeRun(t, pod(tc.ns, "tool-v1", img.toolV1, never, noSecret))
	defer func() { assert.NoError(t, c.remove(ctx, tc.ns, "tool-v1")) }()
	_, err = c.awaitEvent(ctx, tc.ns, "tool-v1", "Pulled", "already present on machine")
	assert.NoError(t, err)
	p, err := c.client.CoreV1().Pods(b.ns).Get(ctx, "tool-v2", metav1.GetOptions{})
	require.NoError(t, err)
	o, done := containerOutcome(p)
	assert.False(t, done, "the pull of shared/tool:v2 was still in flight (outcome %+v)", o)

	release()
	o, err = c.await(ctx, b.ns, "tool-v2", func(outcome) bool { return true })
	require.NoError(t, err)
	assert.Equal(t, "Running", o.state, "the held pull completes once released: %s", o.message)
}

// alwaysAfterRotation: tenant A's password changed at the registry, the
// secret in the cluster did not. While tenant B's IfNotPresent pod of the
// same image sits in back-off (asking for the image again and again), an
// Always pod of A goes to the registry and is refused with its 401.
func alwaysAfterRotation(t *testing.T, w *world) {
	ctx, c, img, a, b := w.ctx, w.c, w.img, w.a, w.b
	old := c.reg.password(a.user)
	c.reg.setUser(a.user, newSecret(a.user))
	defer c.reg.setUser(a.user, old)

	w.create(t, pod(b.ns, "rotated-b", img.app, ifNotPresent, noSecret))
	defer func() { assert.NoError(t, c.remove(ctx, b.ns, "rotated-b")) }()
	_, err := c.await(ctx, b.ns, "rotated-b", func(o outcome) bool { return o.state == "ImagePullBackOff" })
	require.NoError(t, err)

	logins := c.reg.refusedLogins(a.user)
	from := w.mark(t)
	w.create(t, pod(a.ns, "always-rotated", img.app, corev1.PullAlways, withSecret))
	defer func() { assert.NoError(t, c.remove(ctx, a.ns, "always-rotated")) }()
	o, err := c.await(ctx, a.ns, "always-rotated", func(outcome) bool { return true })
	require.NoError(t, err)
	if asksBeforeAlways(c) {
		// The pull follows the pod's own presence check: serve answers
		// it from A's record, as an IfNotPresent pull (docs/serve.md,
		// "Which kubelets send what"); the registry is not asked.
		assert.Equal(t, "Running", o.state, o.message)
		tr := w.since(t, from, "team-a/app")
		assert.Zero(t, tr.manifestOK, "the registry granted no manifest")
		assert.Equal(t, logins, c.reg.refusedLogins(a.user), "A's credential did not reach the registry")
		t.Logf("kubelet %s asks ImageStatus before an Always pull: answered from the record, %d refused logins of %s", c.bins.kubeletRelease.version, c.reg.refusedLogins(a.user)-logins, a.user)
		return
	}
	assert.Contains(t, []string{"ErrImagePull", "ImagePullBackOff"}, o.state)
	assert.Regexp(t, refusedByRegistry, o.message)
	_, err = c.awaitEventMatching(ctx, a.ns, "always-rotated", "Failed", refusedByRegistry)
	assert.NoError(t, err)
	tr := w.since(t, from, "team-a/app")
	assert.Positive(t, tr.manifestDenied, "the registry logged the denied manifest request")
	assert.Zero(t, tr.manifestOK, "the registry granted no manifest")
	assert.Zero(t, tr.blobs)
	assert.Greater(t, c.reg.refusedLogins(a.user), logins, "the token service refused A's old password: the Always pull reached the registry with A's credential")
	t.Logf("while A's Always pod was refused: %d manifest requests refused (B's back-off included), %d refused logins of %s", tr.manifestDenied, c.reg.refusedLogins(a.user)-logins, a.user)

	bp, err := c.client.CoreV1().Pods(b.ns).Get(ctx, "rotated-b", metav1.GetOptions{})
	require.NoError(t, err)
	bo, _ := containerOutcome(bp)
	assert.Contains(t, []string{"ErrImagePull", "ImagePullBackOff"}, bo.state, "tenant B's pod is still refused")
}

// imageVolumeSyncs: the kubelet ensures a pod's image volumes at every
// sync (SyncPod, every syncFrequency, 5 s here, and at every event of the
// pod). A pod of tenant A with an IfNotPresent image volume pulls it once,
// runs with the image's files at /data, and pulls no more over three of
// those syncs (about 15 s: the observation waits for the syncs' events,
// not for the clock).
// The step runs the kubelet with its ImageVolumeWithDigest gate (alpha),
// under which each status update would look the volume's image up by its
// ID, with the pod's annotations, for volumeStatus.image.imageRef
// (kubelet_pods.go; serve answers that look-up from the pod's proof, see
// pkg/criproxy TestImageVolumeDigest). kubelet v1.36.3 never makes it: it
// matches the runtime's mounts to the volume by a name that the CRI's
// ContainerStatus does not carry (kuberuntime's toKubeContainerStatus
// fills no Mount.Name), logs "image was not found" at each status update
// and leaves the field unset, in both modes. Behind serve the syncs report
// no image absent (no answer window).
// The same volume with pullPolicy Never in a new pod of A: the kubelet's
// own implementation accepts A's secret and the pod runs; behind serve it
// is ErrImageNeverPull (the documented difference "Never pods'
// credentials").
func imageVolumeSyncs(t *testing.T, w *world, m mode) {
	ctx, c, img, a := w.ctx, w.c, w.img, w.a
	if rel := c.bins.kubeletRelease; rel.minor < imageVolumeDigestMinor {
		t.Skipf("kubelet %s: image volumes are on by default, and ImageVolumeWithDigest exists, from v1.%d", rel.version, imageVolumeDigestMinor)
	}
	mounts, version, err := c.ctrd.supportsImageVolumes(ctx)
	require.NoError(t, err)
	require.True(t, mounts, "containerd %s does not mount image volumes (2.1 and later do)", version)
	// On the command line, merged with the file's gates; the kubelet
	// restarts without it at the end of the step.
	c.restartKubeletWith(ctx, "--feature-gates", "ImageVolumeWithDigest=true")
	defer c.restartKubeletWith(ctx)

	from := w.mark(t)
	o, err := w.running(t, withImageVolume(pod(a.ns, "vol-1", img.agent, never, withSecret), img.data, ifNotPresent))
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.remove(ctx, a.ns, "vol-1")) }()
	require.Equal(t, "Running", o.state, o.message)
	assert.Equal(t, "data", w.volumeFile(t, a.ns, "vol-1", "/data", "seed"), "the volume holds the image's files")
	tr := w.since(t, from, "team-a/data")
	assert.Positive(t, tr.blobs, "the volume's layers came down")
	_, err = c.awaitEvent(ctx, a.ns, "vol-1", "Pulled", "Successfully pulled image \""+img.data+"\"")
	assert.NoError(t, err)

	type counts struct{ kubeletPulls, kubeletStatuses, servePulls, proven, hidden float64 }
	read := func() counts {
		var n counts
		var err error
		n.kubeletPulls, err = c.kubeletMetric(ctx, "kubelet_runtime_operations_total", map[string]string{"operation_type": "pull_image"})
		require.NoError(t, err)
		n.kubeletStatuses, err = c.kubeletMetric(ctx, "kubelet_runtime_operations_total", map[string]string{"operation_type": "image_status"})
		require.NoError(t, err)
		if m.proxy {
			n.servePulls, err = c.serveMetric(ctx, "pullguard_criproxy_requests_total", map[string]string{"method": "PullImage"})
			require.NoError(t, err)
			n.proven, err = c.serveMetric(ctx, "pullguard_criproxy_decisions_total", map[string]string{"method": "ImageStatus", "outcome": "proven"})
			require.NoError(t, err)
			n.hidden, err = c.serveMetric(ctx, "pullguard_criproxy_decisions_total", map[string]string{"method": "ImageStatus", "outcome": "hidden"})
			require.NoError(t, err)
		}
		return n
	}
	pulling := func() int {
		n, err := c.eventCount(ctx, a.ns, "vol-1", "Pulling", img.data)
		require.NoError(t, err)
		return n
	}
	present := func() int {
		n, err := c.eventCount(ctx, a.ns, "vol-1", "Pulled", "Container image \""+img.data+"\" already present on machine")
		require.NoError(t, err)
		return n
	}
	before, pulling0, present0 := read(), pulling(), present()
	from = w.mark(t)
	// The observation ends after the kubelet has ensured the volume's
	// image at syncs of the pod (its "already present" events, serve's
	// answers from the pod's proof), not after a span of the clock.
	const syncs = 3
	start := time.Now()
	err = poll(2*time.Minute, 250*time.Millisecond, func() (bool, error) {
		if present()-present0 < syncs {
			return false, nil
		}
		return !m.proxy || read().proven-before.proven >= syncs, nil
	})
	require.NoError(t, err, "the kubelet's syncs of the pod did not ensure the volume's image %d times", syncs)
	after := read()
	assert.Zero(t, w.since(t, from, "").total, "no registry request over the syncs")
	assert.Equal(t, before.kubeletPulls, after.kubeletPulls, "the kubelet's PullImage calls over the syncs")
	assert.GreaterOrEqual(t, after.kubeletStatuses-before.kubeletStatuses, float64(syncs), "the kubelet's ImageStatus calls: its syncs asked for the volume's image")
	assert.Equal(t, pulling0, pulling(), "no new Pulling event")
	assert.GreaterOrEqual(t, present()-present0, syncs, "the kubelet's syncs found the volume's image present (events of it)")
	if m.proxy {
		assert.Equal(t, before.servePulls, after.servePulls, "PullImage requests serve received")
		assert.GreaterOrEqual(t, after.proven-before.proven, float64(syncs), "presence checks serve answered from the pod's proof")
		assert.Equal(t, before.hidden, after.hidden, "look-ups serve reported absent (each would open an answer window)")
	}
	ref, err := c.volumeImageRef(ctx, a.ns, "vol-1", "data")
	require.NoError(t, err)
	assert.Empty(t, ref, "volumeStatus.image.imageRef: kubelet v1.36.3 sets none under its ImageVolumeWithDigest gate")
	assert.True(t, c.kubeletLogHas(`err="image was not found" pod="vol-1" container="app" volume="data"`), "the kubelet's log says why")
	t.Logf("over %d syncs (%s): the kubelet's ImageStatus calls %+.0f, PullImage %+.0f; serve's PullImage %+.0f, proven %+.0f, hidden %+.0f; events Pulling %d -> %d, already present %d -> %d; imageRef %q",
		syncs, time.Since(start).Round(100*time.Millisecond),
		after.kubeletStatuses-before.kubeletStatuses, after.kubeletPulls-before.kubeletPulls, after.servePulls-before.servePulls,
		after.proven-before.proven, after.hidden-before.hidden, pulling0, pulling(), present0, present(), ref)

	t.Run("the same image volume with pullPolicy Never", func(t *testing.T) {
		from := w.mark(t)
		o, err := c.run(ctx, withImageVolume(pod(a.ns, "vol-never", img.agent, never, withSecret), img.data, never))
		require.NoError(t, err)
		defer func() { assert.NoError(t, c.remove(ctx, a.ns, "vol-never")) }()
		if m.proxy {
			// The documented difference: a Never pod cannot show its
			// credentials through the CRI.
			assert.Equal(t, "ErrImageNeverPull", o.state, o.message)
			_, err = c.awaitEvent(ctx, a.ns, "vol-never", "ErrImageNeverPull", img.data)
			assert.NoError(t, err)
		} else {
			assert.Equal(t, "Running", o.state, o.message)
			_, err = c.awaitEvent(ctx, a.ns, "vol-never", "Pulled", "Container image \""+img.data+"\" already present on machine and can be accessed by the pod")
			assert.NoError(t, err)
		}
		assert.Zero(t, w.since(t, from, "").total, "Never makes no registry request")
	})
}

// alwaysPresentCost: an Always pod of tenant A's image, present and
// recorded with A's credential. Under the kubelet's own gate containerd
// pulls: its HEAD answered by the token challenge, the same HEAD granted,
// no blob. Behind serve the pull is not answered from the record (no
// presence check came before it): serve's GET of the present image's
// manifest, challenged then granted, stands for the runtime's pull. The
// same two requests both ways (docs/serve.md, "What a verification
// costs").
func alwaysPresentCost(t *testing.T, w *world) {
	ctx, c, img, a := w.ctx, w.c, w.img, w.a
	p := pod(a.ns, "always-present", img.app, corev1.PullAlways, withSecret)
	t.Cleanup(func() { _ = c.remove(ctx, a.ns, "always-present") })
	from := w.mark(t)
	o, missed, err := c.running(ctx, p)
	require.NoError(t, err)
	require.Equal(t, "Running", o.state, o.message)
	tr := w.since(t, from, "team-a/app")
	t.Logf("an Always pod of a present image in the registry's log: %d manifest requests refused, %d granted, %d blobs", tr.manifestDenied, tr.manifestOK, tr.blobs)
	assert.Zero(t, tr.blobs, "no layer was downloaded")
	switch {
	case asksBeforeAlways(c) && c.mode.proxy && !missed:
		// The pull follows the pod's own presence check: serve answers
		// it from A's record; the registry is not asked.
		assert.Zero(t, tr.total, "kubelet %s asks ImageStatus before an Always pull: answered from the record", c.bins.kubeletRelease.version)
	case asksBeforeAlways(c) && c.mode.proxy:
		t.Logf("the kubelet pulled once without the pod's secret (its secret cache missed its sync): that refused pull is in the count")
	default:
		alwaysCost(t, tr, missed)
	}
	_, err = c.awaitEvent(ctx, a.ns, "always-present", "Pulled", "Successfully pulled image")
	assert.NoError(t, err)
	require.NoError(t, c.remove(ctx, a.ns, "always-present"))
}

// asksBeforeAlways says whether the node's kubelet asks ImageStatus
// before an Always pull (before v1.32).
func asksBeforeAlways(c *cluster) bool {
	return c.bins.kubeletRelease.minor < alwaysPullsWithoutAskingMinor
}

// alwaysCost checks what an Always pull of a present image cost.
func alwaysCost(t *testing.T, tr traffic, missed bool) {
	assert.Equal(t, 1, tr.manifestOK, "one granted manifest request")
	if missed {
		t.Logf("the kubelet pulled once without the pod's secret (its secret cache missed its sync): that refused pull is in the count")
	} else {
		assert.Equal(t, 1, tr.manifestDenied, "the token challenge")
	}
}
