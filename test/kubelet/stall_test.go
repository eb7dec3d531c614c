package kubelet

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stallTimeout is serve's verification time limit in TestStallingRegistry
// (--registry-request-timeout): shorter than the default (30 s) to keep
// the test short, long enough that the registry's stall, not a slow
// machine, is what ends the pulls.
const stallTimeout = 10 * time.Second

// stallModes are the node as installed (the snippet's parallel pulls, at
// most 10 at once), under the kubelet's own gate and behind serve with
// its verification time limit set to stallTimeout.
var stallModes = []mode{
	{name: gateMode, kubeletGate: true, installed: true},
	{name: serveMode, proxy: true, installed: true, serveArgs: []string{"--registry-request-timeout", stallTimeout.String()}},
}

// TestStallingRegistry: tenant D's registry serves the runtime's pulls and
// stalls every request pullguard itself sends it (a registry can tell them
// apart by user agent), for ten pods of D: as many as the kubelet pulls at
// once (the snippet's maxParallelImagePulls: 10). The kubelet's PullImage
// has no deadline of its own and holds a pull slot while it waits, so
// without serve's own limit those ten would hold every slot of the node
// for as long as the registry likes. Behind serve, once the registry holds
// ten of serve's requests (every slot of the kubelet is then held), tenant
// A's five pods are created: each of D's pulls fails within serve's limit
// with DeadlineExceeded naming the registry, and A's five run within that
// limit plus their usual start time (measured first, in the same run, on
// pods of the same kind), having waited for the slots D's pods held. Under
// the kubelet's own gate nobody asks pullguard's questions: the ten pods
// and A's five, created at once, run.
func TestStallingRegistry(t *testing.T) {
	bins, podLogs := prepare(t)
	for _, m := range stallModes {
		t.Run(m.name, func(t *testing.T) {
			if m.proxy && bins.pullguard == "" {
				t.Skip("skipped: " + bins.noServe)
			}
			stallingRegistry(t, m, bins, podLogs)
		})
	}
}

func stallingRegistry(t *testing.T, m mode, bins binaries, podLogs *[]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const stalled, others = 10, 5
	var dImages, baseImages, aImages []string
	c := startCluster(t, ctx, m, bins, func(c *cluster) {
		c.reg.grant("alice", "team-a/")
		c.reg.grant("dave", "team-d/")
		publish := func(repo string) string {
			i, err := image(bins.pauseBytes, repo)
			require.NoError(t, err)
			ref, err := push(ctx, c.reg, i, repo, "v1")
			require.NoError(t, err)
			return ref
		}
		for i := range stalled {
			dImages = append(dImages, publish(fmt.Sprintf("team-d/app-%d", i)))
		}
		for i := range others {
			baseImages = append(baseImages, publish(fmt.Sprintf("team-a/usual-%d", i)))
			aImages = append(aImages, publish(fmt.Sprintf("team-a/app-%d", i)))
		}
	})
	*podLogs = append(*podLogs, c.dir+"/pod-logs")
	w := &world{ctx: ctx, c: c}
	var err error
	w.a, err = c.newTenant(ctx, "team-a", "alice")
	require.NoError(t, err)
	d, err := c.newTenant(ctx, "team-d", "dave")
	require.NoError(t, err)

	// A's usual start time: five pods of first pulls, as in the stall.
	var usual time.Duration
	w.step(t, "tenant A's five pods alone: their usual start time", func(t *testing.T) {
		took := c.startTogether(t, ctx, podsOf(w.a.ns, "usual", baseImages))
		for _, d := range took {
			usual = max(usual, d)
		}
		t.Logf("five first pulls of tenant A, created at once: all running after %s", usual.Round(10*time.Millisecond))
	})

	held, release := c.reg.stall("pullguard", "/v2/team-d/")
	t.Cleanup(release)
	w.step(t, "ten pods of a stalling registry hold the kubelet's pull slots; another tenant's five pods", func(t *testing.T) {
		stalledPods := podsOf(d.ns, "stalled", dImages)
		var wg sync.WaitGroup
		var outcomes []time.Duration
		var stallErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes, stallErr = c.awaitStalled(ctx, stalledPods, m.proxy)
		}()
		var spread time.Duration // from the first request held to the tenth
		if m.proxy {
			// Every slot is held once the registry holds ten of serve's
			// requests (each within a PullImage of the kubelet's).
			err := poll(2*time.Minute, 20*time.Millisecond, func() (bool, error) { return held() >= 1, nil })
			require.NoError(t, err, "the registry held none of serve's requests")
			first := time.Now()
			err = poll(2*time.Minute, 20*time.Millisecond, func() (bool, error) { return held() >= stalled, nil })
			require.NoError(t, err, "the registry held %d of serve's requests", held())
			spread = time.Since(first)
			t.Logf("the registry holds serve's ten requests (the first %s before the tenth): every pull slot of the kubelet is held", spread.Round(10*time.Millisecond))
		}
		took := c.startTogether(t, ctx, podsOf(w.a.ns, "app", aImages))
		wg.Wait()
		require.NoError(t, stallErr)

		bound := usual + stallTimeout + 10*time.Second // the machine's slack
		for i, d := range took {
			assert.LessOrEqual(t, d, bound, "tenant A's pod %d ran within serve's limit plus its usual start time", i)
		}
		for i, d := range outcomes {
			t.Logf("tenant D's pod %d: %s", i, d.Round(10*time.Millisecond))
			if m.proxy {
				assert.LessOrEqual(t, d, stallTimeout+usual+10*time.Second, "tenant D's pod %d: its pull ended within serve's limit", i)
			}
		}
		if m.proxy {
			// A's pods waited for the slots D's pulls held, until serve's
			// limit freed the first of them: so the slots were held.
			assert.Greater(t, slices.Min(took), stallTimeout-spread-time.Second, "tenant A's pods waited for a pull slot")
		}
		t.Logf("tenant A's five pods beside the stall: %v (alone: %s)", roundAll(took), usual.Round(10*time.Millisecond))
	})
	release()
}

// podsOf is one IfNotPresent pod with the namespace's pull secret per image,
// named prefix-i.
func podsOf(ns, prefix string, imgs []string) []*corev1.Pod {
	var out []*corev1.Pod
	for i, img := range imgs {
		out = append(out, pod(ns, prefix+"-"+strconv.Itoa(i), img, corev1.PullIfNotPresent, withSecret))
	}
	return out
}

// startTogether creates pods at once and returns, for each, how long after
// its creation it was first seen Running; it requires every one to run,
// then removes them.
func (c *cluster) startTogether(t *testing.T, ctx context.Context, pods []*corev1.Pod) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			o, _, err := c.running(ctx, p)
			took[i] = time.Since(start)
			if err == nil && o.state != "Running" {
				err = fmt.Errorf("pod %s/%s: %s: %s", p.Namespace, p.Name, o.state, o.message)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, p := range pods {
		require.NoError(t, errs[i])
		require.NoError(t, c.remove(ctx, p.Namespace, p.Name))
	}
	return took
}

// awaitStalled creates the pods of the stalling registry and waits for
// each one's outcome: behind serve (proxy) a refused pull whose event says
// DeadlineExceeded and names the registry; under the kubelet's gate a
// running pod. It returns how long each took, and removes them.
func (c *cluster) awaitStalled(ctx context.Context, pods []*corev1.Pod, proxy bool) ([]time.Duration, error) {
	took := make([]time.Duration, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if !proxy {
				o, _, err := c.running(ctx, p)
				took[i] = time.Since(start)
				if err == nil && o.state != "Running" {
					err = fmt.Errorf("pod %s/%s: %s: %s", p.Namespace, p.Name, o.state, o.message)
				}
				errs[i] = err
				return
			}
			if _, err := c.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs[i] = fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err)
				return
			}
			o, err := c.await(ctx, p.Namespace, p.Name, func(o outcome) bool { return pullRefused(o) || o.state == "Running" })
			took[i] = time.Since(start)
			switch {
			case err != nil:
				errs[i] = err
			case !pullRefused(o):
				errs[i] = fmt.Errorf("pod %s/%s ran: %s", p.Namespace, p.Name, o.state)
			default:
				evs, err := c.awaitEvent(ctx, p.Namespace, p.Name, "Failed", "DeadlineExceeded")
				if err == nil && !strings.Contains(fmt.Sprint(evs), c.reg.addr) {
					err = fmt.Errorf("pod %s/%s: the error does not name the registry %s: %+v", p.Namespace, p.Name, c.reg.addr, evs)
				}
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	for i, p := range pods {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if err := c.remove(ctx, p.Namespace, p.Name); err != nil {
			return nil, err
		}
	}
	return took, nil
}
