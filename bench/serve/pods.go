//go:build linux

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubeletSeenLayout is how the kubelet writes kubernetes.io/config.seen
// (RFC3339 with nine fractional digits, k8s.io/cri-client's
// RFC3339NanoFixed).
const kubeletSeenLayout = "2006-01-02T15:04:05.000000000Z07:00"

// podSeq numbers the pods, so that each has its own config.seen.
var podSeq atomic.Int64

// podLatency is one pod's calls, timed.
type podLatency struct{ status, pull, pod time.Duration }

// burst starts n pods at once through client, as the kubelet starts them
// for IfNotPresent containers of private images already on the node: for
// each, its presence check (ImageStatus with the pod's annotations, the
// two the kubelet sets on every pod among them), which serve must answer
// "absent" (the pod has shown no credential yet), then PullImage with the
// pod's tenant's credential and the same annotations in the spec and the
// sandbox config, which serve must answer from its record with the
// image's ID. Pod j belongs to tenant j mod len(ts) and asks a random
// image.
func burst(ctx context.Context, client criapi.ImageManagerService, rt *fakeRuntime, ts []tenant, n int, rng *rand.Rand) ([]podLatency, error) {
	type podCall struct {
		image *runtimeapi.Image
		name  string
		t     tenant
		seq   int64
	}
	calls := make([]podCall, n)
	for j := range calls {
		i := rng.IntN(len(rt.images))
		calls[j] = podCall{image: rt.images[i], name: imageName(i), t: ts[j%len(ts)], seq: podSeq.Add(1)}
	}
	out := make([]podLatency, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for j, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ann := map[string]string{
				"kubernetes.io/config.source": "api",
				"kubernetes.io/config.seen":   time.Now().Add(time.Duration(c.seq)).Format(kubeletSeenLayout),
			}
			spec := &runtimeapi.ImageSpec{Image: c.name, Annotations: ann}
			sandbox := &runtimeapi.PodSandboxConfig{
				Metadata:    &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("pod-%d", c.seq), Namespace: c.t.namespace, Uid: fmt.Sprintf("uid-%d", c.seq)},
				Annotations: ann,
			}
			t0 := time.Now()
			st, err := client.ImageStatus(ctx, spec, false)
			t1 := time.Now()
			if err != nil {
				errs[j] = fmt.Errorf("presence check: %w", err)
				return
			}
			if st.GetImage() != nil {
				errs[j] = fmt.Errorf("a credential-pulled image was reported present to a pod that showed no credential")
				return
			}
			ref, err := client.PullImage(ctx, spec, c.t.auth, sandbox)
			t2 := time.Now()
			if err != nil {
				errs[j] = fmt.Errorf("pull: %w", err)
				return
			}
			if ref != c.image.Id {
				errs[j] = fmt.Errorf("pull answered %s, want %s", ref, c.image.Id)
				return
			}
			out[j] = podLatency{status: t1.Sub(t0), pull: t2.Sub(t1), pod: t2.Sub(t0)}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
