package criproxy_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/hostile"
	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// registryTimeout is serve's registry timeout in these tests, against a
// registry that stalls; against any other, the default, so that a bound,
// not the deadline, ends the verification.
const registryTimeout = 400 * time.Millisecond

// slack is what a loaded machine (-race, two shared cores) may add to a
// bounded call beyond its timeout.
const slack = 2 * time.Second

// kubeletPods numbers the pods of kubeletEnsure, for their config.seen.
var kubeletPods atomic.Int64

// kubeletEnsure is the kubelet v1.36's EnsureImageExists for an
// IfNotPresent container of a new pod of ns: the presence check with the
// pod's annotations (the two the kubelet sets on every pod), then, if
// reported absent, PullImage with the same spec, the pod's sandbox config
// and auth, under a context that has no deadline (cri-client's PullImage
// has none).
func (e *verifyEnv) kubeletEnsure(ns, image string, auth *runtimeapi.AuthConfig) (string, error) {
	n := kubeletPods.Add(1)
	spec := &runtimeapi.ImageSpec{Image: image, Annotations: map[string]string{
		"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": time.Unix(1_800_000_000, n).UTC().Format(time.RFC3339Nano)}}
	ctx := context.Background()
	st, err := e.srv.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
	if err != nil {
		return "", err
	}
	if st.GetImage() != nil {
		return st.GetImage().GetId(), nil
	}
	resp, err := e.srv.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, Auth: auth, SandboxConfig: pod(ns, fmt.Sprintf("p%d", n))})
	return resp.GetImageRef(), err
}

// hostileDigest is what the hostile registry claims in its HEADs: the
// digest of content the runtime holds, so that the runtime's pull (a
// HEAD, as containerd resolves a name) names it at once, and the pull's
// cost is serve's own requests.
var hostileDigest = "sha256:" + strings.Repeat("cd", 32)

// withHostileImage puts, in e's runtime, an image that the hostile
// registry at host claims; with present, it is already on the node
// under the hostile name, pulled there by tenant A's secret (so that
// every other credential is verified at that registry before any pull).
func (e *verifyEnv) withHostileImage(t *testing.T, host string, present bool) string {
	t.Helper()
	const id = "sha256:00000000000000000000000000000000000000000000000000000000000000cd"
	image := host + "/evil/app:v1"
	img := &runtimeapi.Image{Id: id, Size: 1, RepoDigests: []string{"registry.example/elsewhere/app@" + hostileDigest}}
	if present {
		img.RepoTags = []string{image}
		img.RepoDigests = append(img.RepoDigests, host+"/evil/app@"+hostileDigest)
	}
	e.backend.Add(img)
	if present {
		auth := credential.AuthConfig{Username: "alice", Password: verifyPasswords["alice"]}
		require.NoError(t, e.tracker.RecordPullIntent(image))
		require.NoError(t, e.tracker.RecordImagePulled(image, id, credential.Credential{Registry: host, Auth: auth, Hash: e.tracker.Hasher().Hash(host, auth),
			Source: credential.Source{Kind: credential.SourceSecret, Namespace: "team-a", Name: "pull", UID: "team-a-pull-uid"}}))
	}
	return image
}

// closeIdle closes the idle connections of the transports the tests'
// runtime and registry clients share, so that their goroutines end.
func closeIdle() {
	for _, rt := range []http.RoundTripper{http.DefaultTransport, remote.DefaultTransport} {
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}

// newHostileEnv is serve with a verifier of timeout, tenant A's image on
// the node, and a hostile registry in mode whose image the runtime holds
// (see withHostileImage); it returns the hostile image.
func newHostileEnv(t *testing.T, mode hostile.Mode, present bool, timeout time.Duration) (*verifyEnv, *hostile.Registry, string) {
	t.Helper()
	e := newVerifyEnvTimeout(t, true, timeout)
	liar, err := hostile.Start(hostileDigest, e.media, mode)
	require.NoError(t, err)
	t.Cleanup(liar.Close)
	return e, liar, e.withHostileImage(t, liar.Host, present)
}

// assertNothingGained checks that a pull that failed at a hostile
// registry gained its tenant nothing: a new pod's presence check reports
// the image absent, a Never pod with nothing to show is refused, and the
// records name no credential but tenant A's (present) or none.
func (e *verifyEnv) assertNothingGained(t *testing.T, image string, present bool) {
	t.Helper()
	n := kubeletPods.Add(1)
	st, err := e.srv.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image, Annotations: map[string]string{
		"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": time.Unix(1_800_000_000, n).UTC().Format(time.RFC3339Nano)}}})
	require.NoError(t, err)
	assert.Nil(t, st.GetImage(), "a new pod's presence check reports the image absent")
	img := e.backend.Find(image)
	require.NotNil(t, img, "the runtime holds the name")
	d := e.tracker.Decide(credtracker.Request{Image: image, PullPolicy: corev1.PullNever, ImageRef: img.GetId(), Names: criruntime.ImageNames(img)})
	assert.Equal(t, credtracker.FailNeverPull, d.Action, "a Never pod with nothing to show: %s", d.Reason)
	repo, err := credtracker.RepositoryName(image)
	require.NoError(t, err)
	var secrets []string
	for _, rec := range e.tracker.Records() {
		if rr := rec.Repositories[repo]; rr != nil {
			assert.False(t, rr.NodeAccessible, "recorded as node-accessible")
			for _, s := range rr.Secrets {
				secrets = append(secrets, s.Namespace+"/"+s.Name)
			}
		}
	}
	if present {
		assert.Equal(t, []string{"team-a/pull"}, secrets, "tenant A's record, and no other credential")
	} else {
		assert.Empty(t, secrets)
	}
}

type pullResult struct {
	err     error
	elapsed time.Duration
}

// TestHostileRegistry: a tenant's registry answers the runtime's pull
// (a HEAD) and attacks serve's own requests (internal/hostile's resource
// modes, told apart by user agent), for a pod of that tenant whose image
// is new to the node and for one whose image is present and must be
// verified. Through serve as the kubelet v1.36 calls it (annotated
// presence check, then PullImage with the pod's sandbox config and
// credential, no deadline): the pod gets a clear error (a stall:
// DeadlineExceeded by serve's registry timeout; anything else: the
// verification's PermissionDenied, or the refusal a registry's answer
// amounts to) naming the host and the image, with no credential; another tenant's pull through the same serve, against
// an honest registry, completes while the hostile one is held; serve's
// heap and goroutines come back to what they were.
func TestHostileRegistry(t *testing.T) {
	modes := []struct {
		mode   hostile.Mode
		stalls bool // else the registry's answer fails the verification
		// verification is what one verification may allocate beyond
		// 1 MiB, as pkg/criruntime's TestRegistryBounds measures it: a
		// manifest read to its bound (containerd's 4 MiB) by doubling,
		// under 2.5 times it; containerd's parser on the longest header
		// that passes the bound, 12.5 MiB; twice either under -race.
		verification int64
	}{
		{mode: hostile.StallAfterHeaders, stalls: true},
		{mode: hostile.OneBytePerSecond, stalls: true},
		{mode: hostile.TLSStall, stalls: true},
		{mode: hostile.HugeToken},
		{mode: hostile.HugeManifest, verification: 22 << 20},
		{mode: hostile.RedirectLoop},
		{mode: hostile.ManyChallenges},
		// Its token realm answers 404, which says nothing of the
		// manifest: no refusal, the runtime's pull decides, and the
		// verification refuses it.
		{mode: hostile.EscapedChallenge, verification: 26 << 20},
	}
	for _, m := range modes {
		for _, present := range []bool{false, true} {
			if m.mode == hostile.TLSStall && !present {
				// A registry that answers no byte stalls the runtime's
				// own pull first: the kubelet's slot under its own gate
				// too. serve's requests come first for a present image.
				continue
			}
			name := fmt.Sprintf("%s, new image", m.mode)
			if present {
				name = fmt.Sprintf("%s, present image", m.mode)
			}
			t.Run(name, func(t *testing.T) {
				timeout := criruntime.DefaultRegistryTimeout
				if m.stalls {
					timeout = registryTimeout
				}
				e, liar, evil := newHostileEnv(t, m.mode, present, timeout)
				var hostileEnd *pullResult
				var other time.Duration
				closeIdle()
				cost := hostile.Measure(func() {
					held := make(chan pullResult, 1)
					start := time.Now()
					go func() {
						_, err := e.kubeletEnsure("team-b", evil, basic("bob"))
						held <- pullResult{err: err, elapsed: time.Since(start)}
					}()
					select {
					case <-liar.Attacked():
					case r := <-held:
						hostileEnd = &r
					}
					// Another tenant's pod, against the honest registry,
					// while the hostile pod's pull is at its registry.
					otherStart := time.Now()
					ref, err := e.kubeletEnsure("team-c", e.pushed.Reference, basic("carol"))
					other = time.Since(otherStart)
					assert.NoError(t, err, "the other tenant's pull")
					assert.Equal(t, e.pushed.ConfigDigest, ref)
					if hostileEnd == nil {
						select {
						case r := <-held:
							hostileEnd = &r
							assert.False(t, m.stalls, "the stalled pull ended (%v) before the other tenant's (%v)", r.elapsed, time.Since(start))
						default:
						}
					}
					if hostileEnd == nil {
						select {
						case r := <-held:
							hostileEnd = &r
						case <-time.After(timeout + slack):
						}
					}
				}, closeIdle)
				require.NotNil(t, hostileEnd, "the hostile pod's pull did not end by serve's registry timeout")

				err := hostileEnd.err
				t.Logf("the pod's error after %v: %v\nthe other tenant's pull: %v; %s\nthe registry's log:\n%s",
					hostileEnd.elapsed.Round(time.Millisecond), err, other.Round(time.Millisecond), cost, liar.Log())
				require.Error(t, err)
				msg := status.Convert(err).Message()
				assert.Contains(t, msg, liar.Host, "the error names the host")
				assert.Contains(t, msg, evil, "the error names the image")
				assert.Empty(t, leak.Scan(map[string]string{"error": err.Error()}, verifyPasswords["bob"]))
				if m.stalls {
					assert.Equal(t, codes.DeadlineExceeded, status.Code(err), err)
					assert.Contains(t, msg, "registry "+liar.Host+" did not answer")
					assert.GreaterOrEqual(t, hostileEnd.elapsed, registryTimeout, "serve's deadline ended it")
					assert.Less(t, hostileEnd.elapsed, registryTimeout+slack, "within serve's registry timeout")
				} else {
					assert.Equal(t, codes.PermissionDenied, status.Code(err), err)
					assert.Less(t, hostileEnd.elapsed, slack, "a bound ended it, long before serve's deadline")
				}
				// Both tenants' pulls, both registries' answers, and at
				// most two verifications at the hostile registry (the
				// present image's, then the runtime's pull's).
				assert.Less(t, cost.Allocated, 4<<20+2*m.verification, "bytes allocated meanwhile")
				assert.Less(t, cost.Kept, int64(1<<20), "heap kept")
				assert.LessOrEqual(t, cost.GoroutinesAfter, cost.Goroutines, "goroutines back to their number")
				e.assertNothingGained(t, evil, present)
			})
		}
	}
}

// TestStalledRegistryHoldsNoPullSlot is the attack on the
// kubelet's parallel pulls: ten pods of a tenant whose registry stalls
// serve's requests, and, at the same moment, five pods of another
// tenant. Every stalled pull ends with DeadlineExceeded by serve's
// registry timeout, so none holds a kubelet pull slot longer; every other
// pod's pull completes meanwhile.
func TestStalledRegistryHoldsNoPullSlot(t *testing.T) {
	e, liar, evil := newHostileEnv(t, hostile.StallAfterHeaders, true, registryTimeout)
	const stalled, others = 10, 5
	results := make(chan pullResult, stalled)
	otherErrs := make([]error, others)
	otherTook := make([]time.Duration, others)
	closeIdle()
	cost := hostile.Measure(func() {
		start := time.Now()
		for range stalled {
			go func() {
				_, err := e.kubeletEnsure("team-b", evil, basic("bob"))
				results <- pullResult{err: err, elapsed: time.Since(start)}
			}()
		}
		var wg sync.WaitGroup
		for i := range others {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, otherErrs[i] = e.kubeletEnsure("team-c", e.pushed.Reference, basic("carol"))
				otherTook[i] = time.Since(start)
			}()
		}
		wg.Wait()
		for range stalled {
			select {
			case r := <-results:
				assert.Equal(t, codes.DeadlineExceeded, status.Code(r.err), r.err)
				assert.Contains(t, status.Convert(r.err).Message(), liar.Host)
				assert.GreaterOrEqual(t, r.elapsed, registryTimeout)
				assert.Less(t, r.elapsed, registryTimeout+slack)
			case <-time.After(registryTimeout + slack):
				assert.Fail(t, "a stalled pull did not end by serve's registry timeout")
				return
			}
		}
	}, closeIdle)
	for i, err := range otherErrs {
		assert.NoError(t, err, "the other tenant's pod %d", i)
	}
	t.Logf("the other tenant's pods took %v; all of it: %s", otherTook, cost)
	assert.Less(t, cost.Kept, int64(1<<20), "heap kept")
	assert.LessOrEqual(t, cost.GoroutinesAfter, cost.Goroutines, "goroutines back to their number")
}
