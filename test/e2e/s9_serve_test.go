package e2e

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// Scenario 9: `pullguard serve` between a CRI client and the real
// containerd, driven by crictl (a CRI client nobody here wrote), with the
// registry's own access log as the witness.
func TestServeTenants(t *testing.T) {
	need(t)
	alice, bob, carol := newTenant("s9-alice"), newTenant("s9-bob"), newTenant("s9-carol")
	h.issuer.grant(alice.user, "s9/team-a/*", "pull")
	h.issuer.grant(carol.user, "s9/team-a/*", "pull")
	h.issuer.grant("", "s9/public/*", "pull")
	image := push(t, "s9/team-a/app", "v1", 901)
	d := startServe(t, newRoot(t))
	pg := d.endpoint()

	t.Run("tenant A pulls", func(t *testing.T) {
		m := mark(t)
		out, ok := crictlPull(t, pg, "team-a", "app-1", image, alice)
		require.True(t, ok, out)
		tf := trafficFor(t, m, "s9/team-a/app")
		assert.Positive(t, tf.blobs, "the image was downloaded")
		assert.False(t, inspecti(t, pg, image), "ImageStatus hides an image pulled with a tenant's credential")
		assert.True(t, inspecti(t, h.containerd.endpoint(), image), "containerd has it")
	})
	t.Run("tenant B is refused with the registry's 401 and no blob", func(t *testing.T) {
		m := mark(t)
		out, ok := crictlPull(t, pg, "team-b", "intruder", image, bob)
		assert.False(t, ok)
		assert.Regexp(t, refused, out, "the registry's refusal reaches the client")
		tf := trafficFor(t, m, "s9/team-a/app")
		assert.Equal(t, 401, tf.last.Status, "the re-pull ends at the registry's 401")
		m = mark(t)
		out, ok = crictlPull(t, pg, "team-b", "intruder-2", image, nil)
		assert.False(t, ok, "anonymous too")
		assert.Regexp(t, refused, out)
		tf = trafficFor(t, m, "s9/team-a/app")
		assert.Equal(t, 401, tf.last.Status)
		assert.Zero(t, tf.manifestOK)
		assert.Zero(t, tf.blobs)
	})
	t.Run("tenant A again: no registry request", func(t *testing.T) {
		m := mark(t)
		out, ok := crictlPull(t, pg, "team-a", "app-2", image, alice)
		require.True(t, ok, out)
		assert.Zero(t, registryRequests(t, m))
	})
	t.Run("tenant C is verified: pullguard's GET of the manifest, no runtime pull, no blob", func(t *testing.T) {
		m := mark(t)
		out, ok := crictlPull(t, pg, "team-c", "app", image, carol)
		require.True(t, ok, out)
		tf := trafficFor(t, m, "s9/team-a/app")
		assert.Equal(t, verifiedPresentManifests, tf.manifestOK, "pullguard's GET (no digest without bytes), which stands for the pull")
		assert.Zero(t, tf.blobs)
		m = mark(t)
		_, ok = crictlPull(t, pg, "team-c", "app-2", image, carol)
		require.True(t, ok)
		assert.Zero(t, registryRequests(t, m), "and remembered")
	})
	t.Run("a preloaded image is free", func(t *testing.T) {
		tool := push(t, "s9/public/tool", "1", 902)
		criPull(t, tool, nil) // side-loaded into containerd, not through pullguard
		m := mark(t)
		assert.True(t, inspecti(t, pg, tool))
		assert.Zero(t, registryRequests(t, m))
	})
	t.Run("kubernetes#138175", func(t *testing.T) {
		public := push(t, "s9/public/base", "1", 903)
		private := push(t, "s9/team-a/base", "1", 903) // the same bytes
		criPull(t, public, nil)
		out, ok := crictlPull(t, pg, "team-a", "base", private, alice)
		require.True(t, ok, out)
		assert.True(t, inspecti(t, pg, public), "the preloaded name stays free")
		assert.False(t, inspecti(t, pg, private), "the pulled name needs credentials")
	})
	t.Run("image GC through RemoveImage prunes the records", func(t *testing.T) {
		records := func() float64 { return metricValue(t, d, `pullguard_credtracker_records{location="memory"}`) }
		// crictl rmi asks ImageStatus first, so it works through the proxy
		// for an image free to every pod: one pulled anonymously.
		free := push(t, "s9/public/gc", "1", 905)
		out, ok := crictlPull(t, pg, "team-b", "gc", free, nil)
		require.True(t, ok, out)
		before := records()
		out, ok = crictl(t, pg, "rmi", free)
		require.True(t, ok, out)
		assert.False(t, inspecti(t, h.containerd.endpoint(), free), "containerd removed it")
		assert.Equal(t, before-1, records(), "its record is gone")

		// The kubelet's image GC removes by image ID without asking
		// ImageStatus: that works for a hidden image too.
		private := push(t, "s9/team-a/gc", "v1", 906)
		out, ok = crictlPull(t, pg, "team-a", "gc", private, alice)
		require.True(t, ok, out)
		before = records()
		ref := criImageID(t, private)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt, err := criruntime.NewRemote(ctx, pg, time.Minute)
		require.NoError(t, err)
		defer rt.Close(ctx)
		require.NoError(t, rt.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: ref}))
		assert.False(t, inspecti(t, h.containerd.endpoint(), private))
		assert.Equal(t, before-1, records())
	})
}

// criImageID asks containerd itself for an image's ID.
func criImageID(t *testing.T, image string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := criruntime.NewRemote(ctx, h.containerd.endpoint(), time.Minute)
	require.NoError(t, err)
	defer rt.Close(ctx)
	st, err := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
	require.NoError(t, err)
	require.NotNil(t, st.GetImage())
	return st.GetImage().GetId()
}

// metricValue reads one sample from the daemon's /metrics.
func metricValue(t testing.TB, d *serveDaemon, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.metrics + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimPrefix(l, series+" "), 64)
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("no %s in /metrics", series)
	return 0
}
