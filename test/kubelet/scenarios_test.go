package kubelet

import (
	"context"
	"encoding/base64"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The two wirings whose outcomes are compared: the kubelet's own
// implementation of KEP-2535 (the reference), and the kubelet without it
// behind `pullguard serve`.
var modes = []mode{
	{name: "kubelet-gate-on/containerd", kubeletGate: true},
	{name: "kubelet-gate-off/pullguard-serve", proxy: true},
}

// refusedByRegistry is containerd's wording for the registry's 401 under
// token auth ("pull access denied ... authorization failed"), or under
// basic auth.
var refusedByRegistry = regexp.MustCompile(`401 Unauthorized|pull access denied.*authorization failed`)

// TestKubelet runs the multi-tenant scenarios on a one-node cluster of the
// upstream kubelet and kube-apiserver, once per mode, and asserts on pod
// status, the kubelet's events and the registry's access log.
func TestKubelet(t *testing.T) {
	bins, podLogs := prepare(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			if m.proxy && bins.pullguard == "" {
				t.Skip("skipped: " + bins.noServe)
			}
			scenarios(t, m, bins, podLogs)
		})
	}
}

// images are the test images: each runs the pause binary.
type images struct {
	app    string // team-a/app: tenant A's (and C's) private image
	base   string // team-a/base: private, the same digest as shared
	shared string // shared/base: public, preloaded anonymously
	agent  string // vendor/agent: private, preloaded by the node's admin
}

var metaCreate = metav1.CreateOptions{}

func scenarios(t *testing.T, m mode, bins binaries, podLogs *[]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var img images
	start := time.Now()
	c := startCluster(t, ctx, m, bins, func(c *cluster) {
		c.reg.grant("alice", "team-a/")
		c.reg.grant("carol", "team-a/")
		c.reg.grant("bob", "team-b/")
		c.reg.grant("", "shared/")
		publish := func(repo, seed string) string {
			i, err := image(bins.pauseBytes, seed)
			require.NoError(t, err)
			ref, err := push(ctx, c.reg, i, repo, "v1")
			require.NoError(t, err)
			return ref
		}
		img.app = publish("team-a/app", "app")
		img.base = publish("team-a/base", "base")
		img.shared = publish("shared/base", "base")
		img.agent = publish("vendor/agent", "agent")
		require.NoError(t, c.ctrd.preload(ctx, img.shared, "", ""))
		require.NoError(t, c.ctrd.preload(ctx, img.agent, adminUser, c.reg.password(adminUser)))
	})
	*podLogs = append(*podLogs, c.dir+"/pod-logs")
	a, err := c.newTenant(ctx, "team-a", "alice")
	require.NoError(t, err)
	b, err := c.newTenant(ctx, "team-b", "bob")
	require.NoError(t, err)
	tc, err := c.newTenant(ctx, "team-c", "carol")
	require.NoError(t, err)
	t.Logf("set-up (registry, images, containerd, etcd, kube-apiserver, %skubelet) took %s", map[bool]string{true: "pullguard serve, ", false: ""}[m.proxy], time.Since(start).Round(10*time.Millisecond))
	scenarioStart := time.Now()

	// mark/traffic read the registry's access log around a step.
	mark := func() int {
		pos, err := c.reg.mark(ctx)
		require.NoError(t, err)
		return pos
	}
	since := func(from int, repo string) traffic {
		return summarize(c.reg.hits(from, mark()), repo)
	}
	step := func(name string, f func(t *testing.T)) {
		s := time.Now()
		t.Run(name, f)
		t.Logf("step %q: %s", name, time.Since(s).Round(10*time.Millisecond))
	}
	// refused checks that a pod without access was refused by the
	// registry's 401 with no layer downloaded, then removes it.
	refused := func(t *testing.T, ns, name string, from int, repo string, backOff bool) {
		o, err := c.await(ctx, ns, name, func(outcome) bool { return true })
		require.NoError(t, err)
		assert.Contains(t, []string{"ErrImagePull", "ImagePullBackOff"}, o.state)
		assert.Regexp(t, refusedByRegistry, o.message)
		tr := since(from, repo)
		assert.Zero(t, tr.manifestOK, "the registry granted no manifest")
		assert.Zero(t, tr.blobs, "no layer was downloaded")
		assert.Equal(t, 401, tr.lastManifestStatus, "the pull ended at the registry's 401")
		// One manifest request: containerd's anonymous HEAD, answered by
		// the token challenge, and the same HEAD with a token that grants
		// nothing.
		assert.LessOrEqual(t, tr.manifestDenied, 2)
		t.Logf("%s/%s in the registry's log: %d manifest requests refused, %d granted, %d blobs", ns, name, tr.manifestDenied, tr.manifestOK, tr.blobs)
		evs, err := c.awaitEvent(ctx, ns, name, "Failed", "ErrImagePull")
		assert.NoError(t, err)
		_, err = c.awaitEventMatching(ctx, ns, name, "Failed", refusedByRegistry)
		assert.NoError(t, err, "%+v", evs)
		if backOff {
			o, err = c.await(ctx, ns, name, func(o outcome) bool { return o.state == "ImagePullBackOff" })
			assert.NoError(t, err)
			_, err = c.awaitEvent(ctx, ns, name, "BackOff", "Back-off pulling image")
			assert.NoError(t, err)
		}
		require.NoError(t, c.remove(ctx, ns, name))
	}
	neverPulled := func(t *testing.T, ns, name, image string, from int) {
		o, err := c.await(ctx, ns, name, func(outcome) bool { return true })
		require.NoError(t, err)
		assert.Equal(t, "ErrImageNeverPull", o.state, o.message)
		_, err = c.awaitEvent(ctx, ns, name, "ErrImageNeverPull", image)
		assert.NoError(t, err)
		assert.Zero(t, since(from, "").total, "Never makes no registry request")
		require.NoError(t, c.remove(ctx, ns, name))
	}
	running := func(t *testing.T, o outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, "Running", o.state, o.message)
	}

	step("tenant A pulls its private image", func(t *testing.T) {
		from := mark()
		o, err := c.run(ctx, pod(a.ns, "app-1", img.app, corev1.PullIfNotPresent, true))
		running(t, o, err)
		tr := since(from, "team-a/app")
		assert.Positive(t, tr.manifestOK)
		assert.Positive(t, tr.blobs, "the layers came down")
		_, err = c.awaitEvent(ctx, a.ns, "app-1", "Pulled", "Successfully pulled image")
		assert.NoError(t, err)
	})
	step("tenant B without credentials is refused by the registry", func(t *testing.T) {
		from := mark()
		_, err := c.client.CoreV1().Pods(b.ns).Create(ctx, pod(b.ns, "intruder", img.app, corev1.PullIfNotPresent, false), metaCreate)
		require.NoError(t, err)
		refused(t, b.ns, "intruder", from, "team-a/app", true)
	})
	step("tenant B with its own credentials for other repositories is refused by the registry", func(t *testing.T) {
		from := mark()
		_, err := c.client.CoreV1().Pods(b.ns).Create(ctx, pod(b.ns, "intruder-2", img.app, corev1.PullIfNotPresent, true), metaCreate)
		require.NoError(t, err)
		refused(t, b.ns, "intruder-2", from, "team-a/app", false)
	})
	step("tenant B with imagePullPolicy Never gets ErrImageNeverPull", func(t *testing.T) {
		from := mark()
		_, err := c.client.CoreV1().Pods(b.ns).Create(ctx, pod(b.ns, "intruder-never", img.app, corev1.PullNever, false), metaCreate)
		require.NoError(t, err)
		neverPulled(t, b.ns, "intruder-never", img.app, from)
	})
	step("tenant A's second pod runs with no registry request", func(t *testing.T) {
		from := mark()
		o, err := c.run(ctx, pod(a.ns, "app-2", img.app, corev1.PullIfNotPresent, true))
		running(t, o, err)
		assert.Zero(t, since(from, "").total)
		evs, err := c.awaitEvent(ctx, a.ns, "app-2", "Pulled", "")
		assert.NoError(t, err)
		if m.kubeletGate {
			_, err = c.awaitEvent(ctx, a.ns, "app-2", "Pulled", "already present on machine and can be accessed by the pod")
			assert.NoError(t, err)
		}
		t.Logf("events: %+v", evs)
	})
	step("tenant A with Never and its secret", func(t *testing.T) {
		from := mark()
		p := pod(a.ns, "app-never", img.app, corev1.PullNever, true)
		if m.proxy {
			// The documented difference: a Never pod cannot show its
			// credentials through the CRI, so the proxy refuses it.
			_, err := c.client.CoreV1().Pods(a.ns).Create(ctx, p, metaCreate)
			require.NoError(t, err)
			neverPulled(t, a.ns, p.Name, img.app, from)
			return
		}
		o, err := c.run(ctx, p)
		running(t, o, err)
		assert.Zero(t, since(from, "").total)
	})
	step("tenant C with its own credentials is verified without downloading a layer", func(t *testing.T) {
		from := mark()
		o, err := c.run(ctx, pod(tc.ns, "app", img.app, corev1.PullIfNotPresent, true))
		running(t, o, err)
		tr := since(from, "team-a/app")
		assert.Equal(t, 1, tr.manifestOK, "one granted manifest request")
		assert.Zero(t, tr.blobs, "a verification downloads no layer")
		t.Logf("tenant C in the registry's log: %d manifest refused, %d granted, %d blobs", tr.manifestDenied, tr.manifestOK, tr.blobs)
		_, err = c.awaitEvent(ctx, tc.ns, "app", "Pulled", "Successfully pulled image")
		assert.NoError(t, err)
	})
	step("a preloaded image is free", func(t *testing.T) {
		from := mark()
		o, err := c.run(ctx, pod(b.ns, "agent", img.agent, corev1.PullNever, false))
		running(t, o, err)
		assert.Zero(t, since(from, "").total)
		_, err = c.awaitEvent(ctx, b.ns, "agent", "Pulled", "already present on machine")
		assert.NoError(t, err)
	})
	step("kubernetes#138175", func(t *testing.T) {
		// Tenant A pulls team-a/base, the same digest as the preloaded
		// public shared/base.
		o, err := c.run(ctx, pod(a.ns, "base", img.base, corev1.PullIfNotPresent, true))
		running(t, o, err)
		from := mark()
		_, err = c.client.CoreV1().Pods(b.ns).Create(ctx, pod(b.ns, "private-base", img.base, corev1.PullNever, false), metaCreate)
		require.NoError(t, err)
		neverPulled(t, b.ns, "private-base", img.base, from)

		from = mark()
		p := pod(b.ns, "shared-base", img.shared, corev1.PullNever, false)
		if m.kubeletGate {
			// The upstream kubelet ties the record to the digest: the
			// public name now needs verification (the bug, reproduced).
			_, err := c.client.CoreV1().Pods(b.ns).Create(ctx, p, metaCreate)
			require.NoError(t, err)
			neverPulled(t, b.ns, p.Name, img.shared, from)
			return
		}
		// pullguard keeps the names apart: the public name stays free.
		o, err = c.run(ctx, p)
		running(t, o, err)
		assert.Zero(t, since(from, "").total)
	})
	step("a kubelet restart keeps the protection", func(t *testing.T) {
		s := time.Now()
		c.restartKubelet(ctx)
		t.Logf("kubelet restarted in %s", time.Since(s).Round(10*time.Millisecond))
		from := mark()
		_, err := c.client.CoreV1().Pods(b.ns).Create(ctx, pod(b.ns, "after-restart-never", img.app, corev1.PullNever, false), metaCreate)
		require.NoError(t, err)
		neverPulled(t, b.ns, "after-restart-never", img.app, from)
		from = mark()
		_, err = c.client.CoreV1().Pods(b.ns).Create(ctx, pod(b.ns, "after-restart", img.app, corev1.PullIfNotPresent, false), metaCreate)
		require.NoError(t, err)
		refused(t, b.ns, "after-restart", from, "team-a/app", false)
		from = mark()
		o, err := c.run(ctx, pod(a.ns, "app-3", img.app, corev1.PullIfNotPresent, true))
		running(t, o, err)
		assert.Zero(t, since(from, "").total)
	})
	if m.proxy {
		step("a restart of pullguard serve keeps the protection", func(t *testing.T) {
			s := time.Now()
			c.restartPullguard(ctx)
			t.Logf("pullguard serve restarted in %s", time.Since(s).Round(10*time.Millisecond))
			from := mark()
			_, err := c.client.CoreV1().Pods(b.ns).Create(ctx, pod(b.ns, "after-pg-restart-never", img.app, corev1.PullNever, false), metaCreate)
			require.NoError(t, err)
			neverPulled(t, b.ns, "after-pg-restart-never", img.app, from)
			from = mark()
			_, err = c.client.CoreV1().Pods(b.ns).Create(ctx, pod(b.ns, "after-pg-restart", img.app, corev1.PullIfNotPresent, false), metaCreate)
			require.NoError(t, err)
			refused(t, b.ns, "after-pg-restart", from, "team-a/app", false)
			from = mark()
			o, err := c.run(ctx, pod(a.ns, "app-4", img.app, corev1.PullIfNotPresent, true))
			running(t, o, err)
			assert.Zero(t, since(from, "").total)
		})
	}
	t.Logf("scenarios took %s", time.Since(scenarioStart).Round(10*time.Millisecond))

	if m.proxy {
		t.Run("pullguard saw the pods and logged no credential", func(t *testing.T) {
			log := c.pgOut.from(0)
			// The kubelet's pulls went through the proxy with the pod's
			// identity (its decisions are logged at -v=2).
			for _, p := range []string{`pod="team-a/app-2"`, `pod="team-c/app"`, `pod="team-b/intruder"`} {
				assert.True(t, slices.ContainsFunc(log, func(l string) bool { return strings.Contains(l, p) }), "no line for %s in pullguard's log", p)
			}
			for _, tn := range []*tenant{a, b, tc} {
				for _, l := range log {
					require.NotContains(t, l, tn.password, "a password in pullguard's log")
					require.NotContains(t, l, base64.StdEncoding.EncodeToString([]byte(tn.user+":"+tn.password)), "a password in pullguard's log")
				}
			}
		})
	}
}
