package criproxy_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/kubeletcri"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// BenchmarkProxy measures what the proxy adds to a call, with the fake
// runtime served over gRPC as a real one is: "runtime" calls it directly,
// "proxy" calls it through the proxy (one more gRPC hop and the decision).
// "PullImage/from-record" is a PullImage answered from a record right
// after ImageStatus reported the image absent, in the kubelet's sequence
// for an IfNotPresent container (its four calls are one op).
func BenchmarkProxy(b *testing.B) {
	runtime := &harness{fake: newFakeBackend(), socket: socketDir(b) + "/runtime.sock"}
	runtime.fake.publish(b, reg+"/team-a/app:v1", id(1), "alice:pw")
	hasher, err := credential.NewHasher(make([]byte, credential.KeySize))
	require.NoError(b, err)
	runtime.server, err = criproxy.New(runtime.fake, credtracker.Disabled(), hasher)
	require.NoError(b, err)
	runtime.serve(b)
	ctx := context.Background()
	direct, err := kubeletcri.New(ctx, "unix://"+runtime.socket, time.Minute)
	require.NoError(b, err)
	defer direct.Close(ctx)

	backend, err := criproxy.DialBackend(ctx, "unix://"+runtime.socket, time.Minute)
	require.NoError(b, err)
	defer backend.Close(ctx)
	tr, err := credtracker.New(ctx, credtracker.Config{Dir: b.TempDir()}, guardedpull.Inventory(backend))
	require.NoError(b, err)
	defer tr.Close()
	srv, err := criproxy.New(backend, tr, tr.Hasher())
	require.NoError(b, err)
	proxy := &harness{server: srv, socket: socketDir(b) + "/pg.sock"}
	proxy.serve(b)
	client, err := kubeletcri.New(ctx, "unix://"+proxy.socket, time.Minute)
	require.NoError(b, err)
	defer client.Close(ctx)

	spec := &runtimeapi.ImageSpec{Image: reg + "/team-a/app:v1"}
	auth := &runtimeapi.AuthConfig{Username: "alice", Password: "pw"}
	_, err = client.PullImage(ctx, spec, auth, pod("a", "p"))
	require.NoError(b, err)

	b.Run("ImageStatus/runtime", func(b *testing.B) {
		for b.Loop() {
			_, _ = direct.ImageStatus(ctx, spec, false)
		}
	})
	// The proxy's own client of the runtime (k8s.io/cri-client without its
	// OpenTelemetry handler) against the bare generated gRPC stub on one
	// connection: what replacing cri-client would save per forwarded call.
	b.Run("ImageStatus/runtime-via-DialBackend", func(b *testing.B) {
		for b.Loop() {
			_, _ = backend.ImageStatus(ctx, spec, false)
		}
	})
	conn, err := grpc.NewClient("unix://"+runtime.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	defer conn.Close()
	stub := runtimeapi.NewImageServiceClient(conn)
	b.Run("ImageStatus/runtime-via-grpc-stub", func(b *testing.B) {
		for b.Loop() {
			_, _ = stub.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
		}
	})
	sconn, err := grpc.NewClient("unix://"+runtime.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(1<<20), grpc.WithStaticConnWindowSize(1<<20))
	require.NoError(b, err)
	defer sconn.Close()
	sstub := runtimeapi.NewImageServiceClient(sconn)
	b.Run("ImageStatus/runtime-via-grpc-stub-static-window", func(b *testing.B) {
		for b.Loop() {
			_, _ = sstub.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
		}
	})
	b.Run("ImageStatus/proxy", func(b *testing.B) {
		for b.Loop() {
			_, _ = client.ImageStatus(ctx, spec, false)
		}
	})
	// The hop, as issue 22 states its targets, in the same iterations so
	// that every figure sees the same load: the runtime's own ImageStatus
	// (one round trip to a gRPC server), a new pod's presence check through
	// the proxy (forwarded, decided, reported absent), the bare round trip
	// to the proxy (an ImageStatus with no image, refused without asking
	// the runtime; the bare generated client, since cri-client logs every
	// refusal), and that pod's PullImage answered from its record. Targets:
	// added-p50 (proxy − runtime) at most the hop plus 30 µs
	// (over-budget-p50-µs ≤ 0), and the answered pull faster than the
	// runtime's ImageStatus (answered-vs-runtime-p50 < 1).
	pconn, err := grpc.NewClient("unix://"+proxy.socket, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	require.NoError(b, err)
	defer pconn.Close()
	bare := runtimeapi.NewImageServiceClient(pconn)
	b.Run("Hop/interleaved", func(b *testing.B) {
		var runtimeLat, proxied, hops, answered []time.Duration
		timed := func(lat *[]time.Duration, call func() error) {
			start := time.Now()
			err := call()
			*lat = append(*lat, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			n := hopPods.Add(1)
			ann := map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": time.Unix(1_800_000_000, n).UTC().Format(time.RFC3339Nano)}
			podSpec := &runtimeapi.ImageSpec{Image: spec.Image, Annotations: ann}
			sandbox := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "a", Name: fmt.Sprintf("p%d", n), Uid: fmt.Sprintf("uid-%d", n)}, Annotations: ann}
			timed(&runtimeLat, func() error { _, err := direct.ImageStatus(ctx, spec, false); return err })
			timed(&proxied, func() error {
				st, err := client.ImageStatus(ctx, podSpec, false)
				if err == nil && st.GetImage() != nil {
					return fmt.Errorf("a credential-pulled image was reported present to a new pod (iteration %d)", n)
				}
				return err
			})
			timed(&hops, func() error {
				_, err := bare.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{}})
				if status.Code(err) != codes.InvalidArgument {
					return fmt.Errorf("ImageStatus with no image: %v, want InvalidArgument", err)
				}
				return nil
			})
			timed(&answered, func() error { _, err := client.PullImage(ctx, podSpec, auth, sandbox); return err })
		}
		rt, px, hop, ans := p50(runtimeLat), p50(proxied), p50(hops), p50(answered)
		b.ReportMetric(us(rt), "p50-µs/runtime")
		b.ReportMetric(us(px), "p50-µs/proxy")
		b.ReportMetric(us(hop), "p50-µs/hop")
		b.ReportMetric(us(ans), "p50-µs/answered-pull")
		b.ReportMetric(us(px-rt), "added-p50-µs")
		b.ReportMetric(us(px-rt-hop)-30, "over-budget-p50-µs")
		b.ReportMetric(float64(ans)/float64(rt), "answered-vs-runtime-p50")
	})
	b.Run("PullImage/from-record", func(b *testing.B) {
		// A new pod each time, its calls shaped as the kubelet v1.36 sends
		// them (a bare ImageStatus is a look-up once the kubelet has been
		// seen to annotate, as Hop/interleaved's calls show it).
		for b.Loop() {
			n := hopPods.Add(1)
			ann := map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": time.Unix(1_800_000_000, n).UTC().Format(time.RFC3339Nano)}
			podSpec := &runtimeapi.ImageSpec{Image: spec.Image, Annotations: ann}
			if st, _ := client.ImageStatus(ctx, podSpec, false); st.GetImage() != nil {
				b.Fatal("a credential-pulled image was reported present to a new pod")
			}
			if _, err := client.PullImage(ctx, podSpec, auth, pod("a", fmt.Sprintf("p%d", n))); err != nil {
				b.Fatal(err)
			}
			// The kubelet's ImageStatus after a pull (GetImageSize, the
			// pod's) and at container creation (getImageUser, bare); see
			// test/e2e's BenchmarkServePull.
			_, _ = client.ImageStatus(ctx, podSpec, false)
			_, _ = client.ImageStatus(ctx, spec, false)
		}
	})
}

// hopPods numbers the pods of Hop/interleaved across runs.
var hopPods atomic.Int64

// p50 is the median of lat.
func p50(lat []time.Duration) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)/2]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// BenchmarkGCBurst is the kubelet's image garbage collection behind serve:
// 500 removals by image ID among 5 000 images, each with a record (the
// fake runtime, in process; the server called directly). One op is the
// whole burst. "per-removal-prune" is what a removal cost before issue 22:
// the runtime's removal, then a listing of every image and a prune of
// every record (Server.Prune); "by-id" is RemoveImage now (the record of
// the removed image only).
func BenchmarkGCBurst(b *testing.B) {
	const images, removals = 5000, 500
	ctx := context.Background()
	for _, mode := range []string{"per-removal-prune", "by-id"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				fake := newFakeBackend()
				pulls := make([]credtracker.ImportedPull, images)
				for i := range images {
					name := fmt.Sprintf("%s/team-%d/app-%d:v1", reg, i%50, i)
					fake.preload(b, id(i+1), name)
					pulls[i] = credtracker.ImportedPull{Image: name, ImageRef: id(i + 1)}
				}
				tr, err := credtracker.New(ctx, credtracker.Config{Dir: b.TempDir()}, guardedpull.Inventory(fake))
				require.NoError(b, err)
				require.NoError(b, tr.(credtracker.Importer).Import(pulls, nil, ""))
				srv, err := criproxy.New(fake, tr, tr.Hasher(), criproxy.WithPruneInterval(time.Hour))
				require.NoError(b, err)
				b.StartTimer()
				for i := range removals {
					spec := &runtimeapi.ImageSpec{Image: id(i + 1)}
					if mode == "by-id" {
						_, err = srv.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec})
					} else if err = fake.RemoveImage(ctx, spec); err == nil {
						_, err = srv.Prune(ctx)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				require.Equal(b, images-removals, tr.Status().Records, "every removed image's record went")
				require.NoError(b, tr.Close())
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*removals), "µs/removal")
		})
	}
}
