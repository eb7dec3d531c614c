package kubelet

import (
	"context"
	"encoding/base64"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// refusedByRegistry is containerd's wording for the registry's 401 under
// token auth ("pull access denied ... authorization failed"), or under
// basic auth.
var refusedByRegistry = regexp.MustCompile(`401 Unauthorized|pull access denied.*authorization failed`)

// images are the test images: each runs the pause binary.
type images struct {
	app    string // team-a/app: tenant A's (and C's) private image
	base   string // team-a/base: private, the same digest as shared
	shared string // shared/base: public, preloaded anonymously
	agent  string // vendor/agent: private, preloaded by the node's admin
	// nonRoot is team-a/nonroot: private, its config says USER 65532.
	nonRoot string
	toolV1  string // shared/tool:v1: public, preloaded anonymously
	toolV2  string // shared/tool:v2: public, not preloaded
	data    string // team-a/data: private, mounted as an image volume
}

// imageUID is the USER of img.nonRoot (distroless's "nonroot").
const imageUID = 65532

// world is a running node with its images and three tenants: A (alice)
// and C (carol) may pull team-a/*, B (bob) only team-b/*; anyone may pull
// shared/*.
type world struct {
	ctx      context.Context
	c        *cluster
	img      images
	a, b, tc *tenant
}

func newWorld(t *testing.T, ctx context.Context, m mode, bins binaries, podLogs *[]string) *world {
	w := &world{ctx: ctx}
	start := time.Now()
	w.c = startCluster(t, ctx, m, bins, func(c *cluster) {
		c.reg.grant("alice", "team-a/")
		c.reg.grant("carol", "team-a/")
		c.reg.grant("bob", "team-b/")
		c.reg.grant("", "shared/")
		publishAs := func(repo, tag, seed, user string) string {
			i, err := image(bins.pauseBytes, seed)
			require.NoError(t, err)
			if user != "" {
				i, err = runAs(i, user)
				require.NoError(t, err)
			}
			ref, err := push(ctx, c.reg, i, repo, tag)
			require.NoError(t, err)
			return ref
		}
		publish := func(repo, seed string) string { return publishAs(repo, "v1", seed, "") }
		w.img.app = publish("team-a/app", "app")
		w.img.base = publish("team-a/base", "base")
		w.img.shared = publish("shared/base", "base")
		w.img.agent = publish("vendor/agent", "agent")
		w.img.nonRoot = publishAs("team-a/nonroot", "v1", "nonroot", strconv.Itoa(imageUID))
		w.img.toolV1 = publishAs("shared/tool", "v1", "tool-v1", "")
		w.img.toolV2 = publishAs("shared/tool", "v2", "tool-v2", "")
		w.img.data = publish("team-a/data", "data")
		// Baked into the node before the kubelet starts.
		require.NoError(t, c.ctrd.preload(ctx, w.img.shared, "", ""))
		require.NoError(t, c.ctrd.preload(ctx, w.img.toolV1, "", ""))
		require.NoError(t, c.ctrd.preload(ctx, w.img.agent, adminUser, c.reg.password(adminUser)))
	})
	*podLogs = append(*podLogs, w.c.dir+"/pod-logs")
	var err error
	w.a, err = w.c.newTenant(ctx, "team-a", "alice")
	require.NoError(t, err)
	w.b, err = w.c.newTenant(ctx, "team-b", "bob")
	require.NoError(t, err)
	w.tc, err = w.c.newTenant(ctx, "team-c", "carol")
	require.NoError(t, err)
	t.Logf("set-up (registry, images, containerd, etcd, kube-apiserver, %skubelet) took %s",
		map[bool]string{true: "pullguard serve, ", false: ""}[m.proxy], time.Since(start).Round(10*time.Millisecond))
	return w
}

// mark is a position in the registry's access log after every request so far.
func (w *world) mark(t *testing.T) int {
	pos, err := w.c.reg.mark(w.ctx)
	require.NoError(t, err)
	return pos
}

// since sums up the registry's requests from a mark on (total: all
// repositories; the rest: repo's).
func (w *world) since(t *testing.T, from int, repo string) traffic {
	return summarize(w.c.reg.hits(from, w.mark(t)), repo)
}

func (w *world) step(t *testing.T, name string, f func(t *testing.T)) {
	s := time.Now()
	t.Run(name, f)
	t.Logf("step %q: %s", name, time.Since(s).Round(10*time.Millisecond))
}

// create submits a pod without waiting for it.
func (w *world) create(t *testing.T, p *corev1.Pod) {
	_, err := w.c.client.CoreV1().Pods(p.Namespace).Create(w.ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)
}

// runs creates the pod and requires its container to run.
func (w *world) runs(t *testing.T, p *corev1.Pod) {
	o, err := w.running(t, p)
	require.NoError(t, err)
	require.Equal(t, "Running", o.state, o.message)
}

// running is cluster.running (a pull the kubelet made without the pod's
// secret is not the answer), with such a pull said in the test's log.
func (w *world) running(t *testing.T, p *corev1.Pod) (outcome, error) {
	o, missed, err := w.c.running(w.ctx, p)
	if missed {
		t.Logf("pod %s/%s: the kubelet pulled once without its secret (its secret cache missed its sync); waited for its retry", p.Namespace, p.Name)
	}
	return o, err
}

// refused creates a pod that has no access to repo and checks that the
// registry refused it with its 401 and no layer was downloaded; then it
// removes the pod (with backOff, after seeing ImagePullBackOff).
func (w *world) refused(t *testing.T, p *corev1.Pod, repo string, backOff bool) {
	from := w.mark(t)
	w.create(t, p)
	ctx, c, ns, name := w.ctx, w.c, p.Namespace, p.Name
	o, err := c.await(ctx, ns, name, func(outcome) bool { return true })
	require.NoError(t, err)
	assert.Contains(t, []string{"ErrImagePull", "ImagePullBackOff"}, o.state)
	assert.Regexp(t, refusedByRegistry, o.message)
	tr := w.since(t, from, repo)
	assert.Zero(t, tr.manifestOK, "the registry granted no manifest")
	assert.Zero(t, tr.blobs, "no layer was downloaded")
	assert.Equal(t, 401, tr.lastManifestStatus, "the pull ended at the registry's 401")
	// The cost of a refusal, the same in both modes (docs/serve.md, "What
	// a verification costs"): under the kubelet's own gate containerd's
	// HEAD, answered by the token challenge, and the same HEAD with a
	// token that grants nothing; behind serve, for an image on the node,
	// serve's own GET, refused the same way, whose refusal is the pull's
	// answer (the runtime is not asked).
	assert.Equal(t, refusedManifests, tr.manifestDenied, "the registry's requests for one refused pull")
	t.Logf("%s/%s in the registry's log: %d manifest requests refused, %d granted, %d blobs", ns, name, tr.manifestDenied, tr.manifestOK, tr.blobs)
	evs, err := c.awaitEvent(ctx, ns, name, "Failed", "ErrImagePull")
	assert.NoError(t, err)
	_, err = c.awaitEventMatching(ctx, ns, name, "Failed", refusedByRegistry)
	assert.NoError(t, err, "%+v", evs)
	if backOff {
		_, err = c.await(ctx, ns, name, func(o outcome) bool { return o.state == "ImagePullBackOff" })
		assert.NoError(t, err)
		_, err = c.awaitEvent(ctx, ns, name, "BackOff", "Back-off pulling image")
		assert.NoError(t, err)
	}
	require.NoError(t, c.remove(ctx, ns, name))
}

// refusedManifests is what a refused pull of a present image costs in
// manifest requests, in both modes: one answered by the token challenge,
// and the same with a token that grants nothing.
const refusedManifests = 2

// neverPulled creates a Never pod and checks that it gets
// ErrImageNeverPull with no registry request; then it removes the pod.
func (w *world) neverPulled(t *testing.T, p *corev1.Pod) {
	from := w.mark(t)
	w.create(t, p)
	ctx, c, ns, name := w.ctx, w.c, p.Namespace, p.Name
	o, err := c.await(ctx, ns, name, func(outcome) bool { return true })
	require.NoError(t, err)
	assert.Equal(t, "ErrImageNeverPull", o.state, o.message)
	_, err = c.awaitEvent(ctx, ns, name, "ErrImageNeverPull", p.Spec.Containers[0].Image)
	assert.NoError(t, err)
	assert.Zero(t, w.since(t, from, "").total, "Never makes no registry request")
	require.NoError(t, c.remove(ctx, ns, name))
}

// freeRun creates the pod and checks that it runs with no registry request.
func (w *world) freeRun(t *testing.T, p *corev1.Pod) {
	from := w.mark(t)
	w.runs(t, p)
	assert.Zero(t, w.since(t, from, "").total, "no registry request")
}

// noCredentialInPullguardLog checks pullguard's log: the pods' pulls are
// there with their identity, no tenant password is (in any encoding
// pullguard could have met).
func (w *world) noCredentialInPullguardLog(t *testing.T, pods ...string) {
	log := w.c.pgOut.from(0)
	for _, p := range pods {
		key := `pod="` + p + `"`
		assert.True(t, slices.ContainsFunc(log, func(l string) bool { return strings.Contains(l, key) }), "no line for %s in pullguard's log", p)
	}
	for _, tn := range []*tenant{w.a, w.b, w.tc} {
		basic := base64.StdEncoding.EncodeToString([]byte(tn.user + ":" + tn.password))
		for _, l := range log {
			require.NotContains(t, l, tn.password, "a password in pullguard's log")
			require.NotContains(t, l, basic, "a password in pullguard's log")
		}
	}
}
