package kubelet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The upgrade and the outage of `pullguard serve` on a running node: the
// steps TestKubelet runs behind serve after its other scenarios, on the
// same node, with the pods those left running.

// serveOutageEnv sets how long serveOutage keeps serve down (a Go
// duration; default defaultServeOutage): `make e2e-kubelet
// SERVE_OUTAGE=60s` shows a minute.
const (
	serveOutageEnv     = "PULLGUARD_E2E_SERVE_OUTAGE"
	defaultServeOutage = 15 * time.Second
)

// The kubelet's wording (pkg/kubelet/images, pkg/kubelet/events) when its
// image service does not answer the presence check of a new container.
const (
	inspectFailedReason = "InspectFailed"     // the event
	inspectErrorState   = "ImageInspectError" // the container's waiting reason
)

// inspectFailedMessage matches the event's message with serve down: the
// kubelet's "Failed to inspect image" (v1.33 and later quote the empty
// reference it got, older ones the image's name) and gRPC's error for a
// socket nobody listens on (serve removes its socket when it stops).
func (c *cluster) inspectFailedMessage() *regexp.Regexp {
	return regexp.MustCompile(`^Failed to inspect image "[^"]*": rpc error: code = Unavailable desc = .*` + regexp.QuoteMeta(c.pgSocket()))
}

// podState is what the API server says of a pod's (first) container.
type podState struct {
	phase       corev1.PodPhase
	state       string // "Running", "Terminated", a waiting reason or ""
	message     string
	restarts    int32
	containerID string
}

func (c *cluster) podState(ctx context.Context, ns, name string) (podState, error) {
	p, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return podState{}, err
	}
	s := podState{phase: p.Status.Phase}
	for _, cs := range p.Status.ContainerStatuses {
		s.restarts, s.containerID = cs.RestartCount, cs.ContainerID
		switch {
		case cs.State.Running != nil:
			s.state = "Running"
		case cs.State.Waiting != nil:
			s.state, s.message = cs.State.Waiting.Reason, cs.State.Waiting.Message
		case cs.State.Terminated != nil:
			s.state, s.message = "Terminated", cs.State.Terminated.Reason
		}
		break
	}
	return s, nil
}

// awaitState polls the pod until its container is in state.
func (c *cluster) awaitState(ctx context.Context, ns, name, state string, within time.Duration) (podState, error) {
	var last podState
	err := poll(within, 50*time.Millisecond, func() (bool, error) {
		s, err := c.podState(ctx, ns, name)
		if err != nil {
			return false, err
		}
		last = s
		return s.state == state, nil
	})
	if err != nil {
		return last, fmt.Errorf("pod %s/%s not %s (last %+v): %w", ns, name, state, last, err)
	}
	return last, nil
}

// runningPods is every pod of the tenants' namespaces whose container
// runs, by namespace/name.
func (w *world) runningPods(t *testing.T) map[string]podState {
	t.Helper()
	out := map[string]podState{}
	for _, tn := range []*tenant{w.a, w.b, w.tc} {
		list, err := w.c.client.CoreV1().Pods(tn.ns).List(w.ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, p := range list.Items {
			s, err := w.c.podState(w.ctx, p.Namespace, p.Name)
			require.NoError(t, err)
			if s.state == "Running" {
				out[p.Namespace+"/"+p.Name] = s
			}
		}
	}
	return out
}

// untouched checks that every pod of before still runs the same
// container, never restarted.
func (w *world) untouched(t *testing.T, before map[string]podState) {
	t.Helper()
	for key, was := range before {
		ns, name, _ := strings.Cut(key, "/")
		now, err := w.c.podState(w.ctx, ns, name)
		if !assert.NoError(t, err, key) {
			continue
		}
		assert.Equal(t, "Running", now.state, "%s: %+v", key, now)
		assert.Equal(t, was.containerID, now.containerID, "%s: the same container", key)
		assert.Zero(t, now.restarts, "%s: restartCount", key)
	}
	t.Logf("%d running pods untouched: the same containers, restartCount 0", len(before))
}

// kubeletHealthy reports whether the kubelet's process runs and its
// /healthz answers 200.
func (c *cluster) kubeletHealthy() error {
	if c.kl.exited() {
		return fmt.Errorf("the kubelet exited")
	}
	resp, err := http.Get(c.health)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kubelet /healthz: %s", resp.Status)
	}
	return nil
}

// nodeReady is the node's Ready condition, as "True: reason: message".
// The test's node is never Ready: it has no network plugin.
func (c *cluster) nodeReady(ctx context.Context) string {
	n, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return "unknown: " + err.Error()
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return string(cond.Status) + ": " + cond.Reason + ": " + cond.Message
		}
	}
	return "no Ready condition"
}

// copyBinary copies the executable src to dst, mode 0755.
func copyBinary(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}

// serveUpgrade replaces serve's binary while pods run: SIGTERM, a pod
// created while serve is down, a new binary started on the same socket
// and store. Nothing restarts, and the new pod starts once serve is back,
// with no registry request (its tenant proved the image).
func serveUpgrade(t *testing.T, w *world) {
	ctx, c, img, a := w.ctx, w.c, w.img, w.a
	before := w.runningPods(t)
	require.NotEmpty(t, before, "pods run before the upgrade")
	next := filepath.Join(c.dir, "pullguard-next", "pullguard")
	require.NoError(t, os.MkdirAll(filepath.Dir(next), 0o755))
	require.NoError(t, copyBinary(c.bins.pullguard, next))
	oldPID := c.pg.cmd.Process.Pid

	from := w.mark(t)
	c.pg.stop(15 * time.Second) // SIGTERM, as systemctl stop
	down := time.Now()
	_, err := os.Stat(c.pgSocket())
	assert.True(t, os.IsNotExist(err), "serve removed its socket when it stopped: %v", err)

	p := pod(a.ns, "during-upgrade", img.app, ifNotPresent, withSecret)
	t.Cleanup(func() { _ = c.remove(ctx, a.ns, p.Name) })
	w.create(t, p)
	// The kubelet tried the pod while serve was down.
	evs, err := c.awaitEventMatching(ctx, a.ns, p.Name, inspectFailedReason, c.inspectFailedMessage())
	require.NoError(t, err, "the kubelet's attempt with serve down")
	s, err := c.awaitState(ctx, a.ns, p.Name, inspectErrorState, 30*time.Second)
	assert.NoError(t, err)
	t.Logf("with serve down, the pod's container is %s: %s; events: %+v", s.state, s.message, evs)

	c.bins.pullguard = next
	c.startPullguard(ctx)
	back := time.Now()
	t.Logf("serve was down %s (SIGTERM to the new binary answering)", back.Sub(down).Round(10*time.Millisecond))
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.pg.cmd.Process.Pid))
	require.NoError(t, err)
	assert.Equal(t, next, exe, "serve runs the new binary")
	assert.NotEqual(t, oldPID, c.pg.cmd.Process.Pid)

	_, err = c.awaitState(ctx, a.ns, p.Name, "Running", 60*time.Second)
	require.NoError(t, err)
	t.Logf("the pod created during the upgrade ran %s after serve was back (the kubelet retries a pod whose sync failed after 10-15 s, or sooner when the pod changes)", time.Since(back).Round(10*time.Millisecond))
	_, err = c.awaitEventMatching(ctx, a.ns, p.Name, "Pulled", pulledFromRecord)
	assert.NoError(t, err)
	tr := w.since(t, from, "team-a/app")
	assert.Zero(t, tr.total, "tenant A proved the image before: no registry request")
	require.NoError(t, c.kubeletHealthy(), "the kubelet kept running")
	w.untouched(t, before)
	require.NoError(t, c.remove(ctx, a.ns, p.Name))
}

// pulledFromRecord is the Pulled event of a pod whose pull serve answered
// from its record ("Successfully pulled image"), or whose presence check
// it answered ("already present on machine").
var pulledFromRecord = regexp.MustCompile(`Successfully pulled image|already present on machine`)

// serveOutageDuration is how long serveOutage keeps serve down.
func serveOutageDuration(t *testing.T) time.Duration {
	v := os.Getenv(serveOutageEnv)
	if v == "" {
		return defaultServeOutage
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "%s=%q", serveOutageEnv, v)
	return d
}

// serveOutage stops serve for serveOutageDuration while pods run and new
// ones arrive: tenant A's pod of an image it proved, and tenant B's pods of
// A's private image with Never and IfNotPresent. While serve is down no
// new container starts (each gets the kubelet's ImageInspectError, retried
// at every pod sync), the running ones are untouched, the registry hears
// nothing, and the kubelet keeps running; a kubelet started in that time
// exits. Once serve is back, A's pod runs with no registry request and B's
// are refused as ever.
func serveOutage(t *testing.T, w *world) {
	ctx, c, img, a, b := w.ctx, w.c, w.img, w.a, w.b
	outage := serveOutageDuration(t)
	before := w.runningPods(t)
	require.NotEmpty(t, before, "pods run before the outage")

	readyBefore := c.nodeReady(ctx)
	fromA := w.mark(t)
	c.pg.stop(15 * time.Second)
	down := time.Now()
	newPods := []*corev1.Pod{
		pod(a.ns, "during-outage", img.base, ifNotPresent, withSecret), // A proved team-a/base (kubernetes#138175's step)
		pod(b.ns, "outage-never", img.app, never, noSecret),
		pod(b.ns, "outage-intruder", img.app, ifNotPresent, noSecret),
	}
	for _, p := range newPods {
		t.Cleanup(func() { _ = c.remove(ctx, p.Namespace, p.Name) })
		w.create(t, p)
	}
	for _, p := range newPods {
		_, err := c.awaitEventMatching(ctx, p.Namespace, p.Name, inspectFailedReason, c.inspectFailedMessage())
		assert.NoError(t, err, "%s: the kubelet's attempt with serve down", p.Name)
		s, err := c.awaitState(ctx, p.Namespace, p.Name, inspectErrorState, 30*time.Second)
		assert.NoError(t, err)
		t.Logf("%s/%s with serve down: %s %q", p.Namespace, p.Name, s.state, s.message)
	}

	// Through the outage: none of the new pods runs, the kubelet stays up.
	var unhealthy error
	err := poll(max(outage-time.Since(down), 0), time.Second, func() (bool, error) {
		for _, p := range newPods {
			s, err := c.podState(ctx, p.Namespace, p.Name)
			if err == nil && s.state == "Running" {
				return true, fmt.Errorf("%s/%s runs with serve down", p.Namespace, p.Name)
			}
		}
		if err := c.kubeletHealthy(); err != nil && unhealthy == nil {
			unhealthy = err
		}
		return false, nil
	})
	require.ErrorContains(t, err, "not done within", "nothing was admitted while serve was down")
	assert.NoError(t, unhealthy, "the kubelet kept running and healthy while serve was down")
	readyDuring := c.nodeReady(ctx)
	t.Logf("the node's Ready condition before the outage %q, after %s of it %q", readyBefore, time.Since(down).Round(time.Second), readyDuring)
	for _, p := range newPods {
		n, err := c.eventCount(ctx, p.Namespace, p.Name, inspectFailedReason, "")
		assert.NoError(t, err)
		assert.Positive(t, n)
		elapsed := time.Since(down)
		t.Logf("%s/%s: %d %s events in %s (one every %s)", p.Namespace, p.Name, n, inspectFailedReason, elapsed.Round(time.Second), (elapsed / time.Duration(max(n, 1))).Round(100*time.Millisecond))
	}
	assert.Zero(t, w.since(t, fromA, "").total, "no registry request while serve was down")
	w.untouched(t, before)

	// A kubelet (re)started now checks its image service once and exits.
	kubeletExitsWithoutServe(t, w)

	c.startPullguard(ctx)
	back := time.Now()
	c.startKubelet(ctx)
	t.Logf("serve was down %s", back.Sub(down).Round(10*time.Millisecond))

	_, err = c.awaitState(ctx, a.ns, "during-outage", "Running", 60*time.Second)
	require.NoError(t, err)
	t.Logf("tenant A's pod ran %s after serve was back", time.Since(back).Round(10*time.Millisecond))
	base := w.since(t, fromA, "team-a/base")
	assert.Zero(t, base.manifestOK+base.manifestDenied+base.blobs, "tenant A proved team-a/base before: no registry request for it")

	w.neverPulledExisting(t, b.ns, "outage-never", img.app)
	o, err := c.await(ctx, b.ns, "outage-intruder", func(o outcome) bool { return pullRefused(o) })
	require.NoError(t, err)
	assert.Regexp(t, refusedByRegistry, o.message, "tenant B refused by the registry once serve was back")
	tr := w.since(t, fromA, "team-a/app")
	assert.Zero(t, tr.manifestOK, "the registry granted no manifest")
	assert.Zero(t, tr.blobs, "no layer was downloaded")
	w.untouched(t, before)
	for _, p := range newPods {
		require.NoError(t, c.remove(ctx, p.Namespace, p.Name))
	}
}

// neverPulledExisting checks that the existing Never pod ns/name ends in
// ErrImageNeverPull with the kubelet's event.
func (w *world) neverPulledExisting(t *testing.T, ns, name, image string) {
	t.Helper()
	s, err := w.c.awaitState(w.ctx, ns, name, "ErrImageNeverPull", 60*time.Second)
	require.NoError(t, err)
	_, err = w.c.awaitEvent(w.ctx, ns, name, "ErrImageNeverPull", image)
	assert.NoError(t, err)
	t.Logf("%s/%s once serve was back: %s %q", ns, name, s.state, s.message)
}

// kubeletExitsWithoutServe stops the kubelet and starts it again while
// serve is down: it checks its image service once at start-up and exits.
// The caller starts it again once serve is back.
func kubeletExitsWithoutServe(t *testing.T, w *world) {
	c := w.c
	c.kl.stop(20 * time.Second)
	pos := c.klOut.position()
	start := time.Now()
	name, args := c.ns.command(c.bins.kubelet, c.klArgs...)
	kl, err := spawn(c.klOut, nil, name, args...)
	require.NoError(t, err)
	t.Cleanup(func() { kl.stop(20 * time.Second) })
	select {
	case <-kl.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("a kubelet started with serve down still runs after 90 s: %s", c.klOut.tail(20))
	}
	took := time.Since(start)
	code := kl.cmd.ProcessState.ExitCode()
	assert.NotZero(t, code, "the kubelet's exit status")
	var why string
	for _, l := range c.klOut.from(pos) {
		if strings.Contains(l, "validate service connection") {
			why = l
		}
	}
	assert.Contains(t, why, c.pgSocket(), "the kubelet said which image service it could not reach")
	t.Logf("a kubelet started with serve down exited with status %d after %s: %s", code, took.Round(10*time.Millisecond), why)
}
