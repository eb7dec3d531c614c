package e2e

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/registry"
	pgruntime "github.com/pullguard/pullguard/pkg/runtime"
)

// benchProxy is the proxy in this process, in front of the suite's
// containerd, with one image pulled through it by a tenant; it returns a
// CRI client of the proxy, one of containerd, and the image.
type benchProxy struct {
	proxy, direct criapi.ImageManagerService
	image         string
	auth          *runtimeapi.AuthConfig
	pod           *runtimeapi.PodSandboxConfig
}

var (
	benchOnce sync.Once
	benchEnv  *benchProxy
	benchErr  error
)

func setupBench(b *testing.B) *benchProxy {
	b.Helper()
	if h.skip != "" {
		b.Skip("e2e: " + h.skip)
	}
	benchOnce.Do(func() { benchEnv, benchErr = newBenchProxy() })
	require.NoError(b, benchErr)
	return benchEnv
}

func newBenchProxy() (*benchProxy, error) {
	ctx := context.Background()
	alice := newTenant("bench-alice")
	h.issuer.grant(alice.user, "bench/team-a/*", "pull")
	img, err := pushImage("bench/team-a/app", "v1", 990)
	if err != nil {
		return nil, err
	}
	backend, err := criproxy.DialBackend(ctx, h.containerd.endpoint(), time.Minute)
	if err != nil {
		return nil, err
	}
	direct, err := pgruntime.NewRemote(ctx, h.containerd.endpoint(), time.Minute)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(h.dir, "bench-proxy")
	tr, err := credtracker.New(ctx, credtracker.Config{Dir: filepath.Join(root, "credtracker")}, criproxy.Inventory(backend))
	if err != nil {
		return nil, err
	}
	srv, err := criproxy.New(backend, tr, tr.Hasher())
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(root, "pg.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(criproxy.UnaryInterceptor(klogDiscard())))
	runtimeapi.RegisterImageServiceServer(gs, srv)
	go func() { _ = gs.Serve(l) }() // stopped with the process: benchmarks run last
	proxy, err := pgruntime.NewRemote(ctx, "unix://"+socket, time.Minute)
	if err != nil {
		return nil, err
	}
	env := &benchProxy{proxy: proxy, direct: direct, image: img,
		auth: &runtimeapi.AuthConfig{Username: alice.user, Password: alice.password},
		pod:  &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "team-a", Name: "bench", Uid: "bench-uid"}}}
	if _, err := proxy.PullImage(ctx, &runtimeapi.ImageSpec{Image: img}, env.auth, env.pod); err != nil {
		return nil, err
	}
	return env, nil
}

// BenchmarkServeImageStatus: ImageStatus of a present image straight to
// containerd, and through the proxy (which adds a gRPC hop and the
// decision; the image is hidden, so the answer is "absent").
func BenchmarkServeImageStatus(b *testing.B) {
	env := setupBench(b)
	spec := &runtimeapi.ImageSpec{Image: env.image}
	for _, bc := range []struct {
		name string
		svc  criapi.ImageManagerService
	}{{"containerd", env.direct}, {"proxy", env.proxy}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := bc.svc.ImageStatus(ctx, spec, false); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			reportPercentiles(b, lat, "call")
		})
	}
}

// BenchmarkServePull: a PullImage answered from a record (the kubelet's
// IfNotPresent path: ImageStatus reported the image absent just before),
// against containerd's own ImageStatus of the same image.
func BenchmarkServePull(b *testing.B) {
	env := setupBench(b)
	spec := &runtimeapi.ImageSpec{Image: env.image}
	ctx := context.Background()
	_, err := env.proxy.ImageStatus(ctx, spec, false) // marks the kubelet's IfNotPresent path
	require.NoError(b, err)
	b.Run("answered-from-record", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := env.proxy.PullImage(ctx, spec, env.auth, env.pod); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportPercentiles(b, lat, "call")
	})
	b.Run("containerd-ImageStatus", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := env.direct.ImageStatus(ctx, spec, false); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportPercentiles(b, lat, "call")
	})
}

// BenchmarkServe64Pods: 64 pods at once ensure the image as the kubelet
// does for IfNotPresent containers with a recorded credential (through the
// proxy: ImageStatus, reported absent, then PullImage, answered from the
// record), against the same 64 asking containerd's ImageStatus directly
// (the stock kubelet with the image present). Reports p50 and p99 of one
// pod's time.
func BenchmarkServe64Pods(b *testing.B) {
	env := setupBench(b)
	spec := &runtimeapi.ImageSpec{Image: env.image}
	flows := map[string]func(ctx context.Context) error{
		"proxy": func(ctx context.Context) error {
			st, err := env.proxy.ImageStatus(ctx, spec, false)
			if err != nil || st.GetImage() != nil {
				return err
			}
			_, err = env.proxy.PullImage(ctx, spec, env.auth, env.pod)
			return err
		},
		"containerd": func(ctx context.Context) error {
			_, err := env.direct.ImageStatus(ctx, spec, false)
			return err
		},
	}
	for _, name := range []string{"containerd", "proxy"} {
		flow := flows[name]
		b.Run(name, func(b *testing.B) {
			var lat []time.Duration
			var mu sync.Mutex
			for b.Loop() {
				var wg sync.WaitGroup
				for p := 0; p < 64; p++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						start := time.Now()
						if err := flow(context.Background()); err != nil {
							b.Error(err)
						}
						d := time.Since(start)
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			reportPercentiles(b, lat, "pod")
		})
	}
}

// pushImage is push for benchmarks' set-up, which has no *testing.T.
func pushImage(repo, tag string, seed int64) (string, error) {
	img, err := registry.Image(seed, 2, 16<<10)
	if err != nil {
		return "", err
	}
	ref, err := name.ParseReference(host() + "/" + repo + ":" + tag)
	if err != nil {
		return "", err
	}
	err = remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: adminUser, Password: adminPassword}))
	return ref.String(), err
}

func klogDiscard() logr.Logger { return logr.Discard() }

// reportPercentiles reports the p50 and p99 of lat, per what.
func reportPercentiles(b *testing.B, lat []time.Duration, what string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs/"+what)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs/"+what)
}
