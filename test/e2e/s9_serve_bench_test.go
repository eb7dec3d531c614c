package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/component-base/metrics/legacyregistry"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/kubeletcri"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/registry"
)

// benchProxy is the proxy in this process, in front of the suite's
// containerd, with one image pulled through it by a tenant; it holds a CRI
// client of the proxy, one of containerd, and the image.
type benchProxy struct {
	proxy, direct criapi.ImageManagerService
	backend       *countingBackend // the proxy's own client of containerd
	image         string
	auth          *runtimeapi.AuthConfig
	pod           *runtimeapi.PodSandboxConfig
}

// pullThrough pulls the image through a proxy with the tenant's
// credential, as the kubelet does for a new pod's Always container:
// PullImage with the pod's annotations, then the size look-up with the
// same spec.
func (env *benchProxy) pullThrough(ctx context.Context, proxy criapi.ImageManagerService) error {
	spec := kubeletSpec(env.image, benchPods.Add(1))
	if _, err := proxy.PullImage(ctx, spec, env.auth, env.pod); err != nil {
		return err
	}
	_, err := proxy.ImageStatus(ctx, spec, false)
	return err
}

// benchPods numbers the pods the benchmarks make calls for.
var benchPods atomic.Int64

// kubeletSpec is the ImageSpec the kubelet (v1.36) sends for pod n's
// image in EnsureImageExists: the pod's annotations, among them the two
// it sets on every pod.
func kubeletSpec(image string, n int64) *runtimeapi.ImageSpec {
	return &runtimeapi.ImageSpec{Image: image, Annotations: map[string]string{
		"kubernetes.io/config.source": "api",
		"kubernetes.io/config.seen":   time.Unix(1_800_000_000, n).UTC().Format(time.RFC3339Nano),
	}}
}

// countingBackend counts the calls the proxy makes to containerd, so that
// a benchmark can check that an answer from a record asked containerd
// nothing.
type countingBackend struct {
	criproxy.Backend
	statuses, pulls atomic.Int64
}

func (c *countingBackend) ImageStatus(ctx context.Context, spec *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	c.statuses.Add(1)
	return c.Backend.ImageStatus(ctx, spec, verbose)
}

func (c *countingBackend) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, pod *runtimeapi.PodSandboxConfig) (string, error) {
	c.pulls.Add(1)
	return c.Backend.PullImage(ctx, spec, auth, pod)
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
	dialed, err := criproxy.DialBackend(ctx, h.containerd.endpoint(), time.Minute)
	if err != nil {
		return nil, err
	}
	backend := &countingBackend{Backend: dialed}
	// The kubelet's own client: k8s.io/cri-client with its defaults.
	direct, err := kubeletcri.New(ctx, h.containerd.endpoint(), time.Minute)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(h.dir, "bench-proxy")
	tr, err := credtracker.New(ctx, credtracker.Config{Dir: filepath.Join(root, "credtracker")}, guardedpull.Inventory(backend))
	if err != nil {
		return nil, err
	}
	// As pullguard serve runs by default: its metrics registered (they are
	// served on --metrics-bind-address), klog's logger at its default
	// verbosity.
	registerBenchMetrics()
	srv, err := criproxy.New(backend, tr, tr.Hasher(), criproxy.WithLogger(klog.Background()))
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(root, "pg.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	gs := criproxy.NewGRPCServer(srv, klog.Background()) // the server pullguard serve runs
	go func() { _ = gs.Serve(l) }()                      // stopped with the process: benchmarks run last
	proxy, err := kubeletcri.New(ctx, "unix://"+socket, time.Minute)
	if err != nil {
		return nil, err
	}
	env := &benchProxy{proxy: proxy, direct: direct, backend: backend, image: img,
		auth: &runtimeapi.AuthConfig{Username: alice.user, Password: alice.password},
		pod:  &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "team-a", Name: "bench", Uid: "bench-uid"}}}
	if err := env.pullThrough(ctx, proxy); err != nil {
		return nil, err
	}
	return env, nil
}

// BenchmarkServeImageStatus: ImageStatus of a present image straight to
// containerd and through the proxy (one more gRPC hop, the proxy's own
// call to containerd and the decision; the image is hidden, so the
// proxy's answer is "absent"). Both are asked in every iteration, in
// alternating order, so that both see the same machine load; added-p50 is
// the difference of the two p50s, what the target bounds.
func BenchmarkServeImageStatus(b *testing.B) {
	env := setupBench(b)
	compareImageStatus(b, env.direct, env.proxy, env.image)
}

// BenchmarkServeImageStatusDaemon is BenchmarkServeImageStatus through
// the real `pullguard serve` binary, as deployed: its own process (its own
// Ps and scheduler, not the benchmark's), its own root directory, at its
// default verbosity, in front of the same containerd. The image is pulled
// through it with the tenant's credential first, so that it is hidden
// there too. The daemon is stopped by its PID in cleanup.
//
// Each iteration also asks the daemon an ImageStatus with no image, which
// it refuses (InvalidArgument) without asking containerd: p50-µs/hop is
// the bare round trip to the daemon, the floor of what a forwarded call
// adds. serve-cpu-µs/iter and serve-allocs/iter are the daemon's CPU time
// (user and system, from /proc) and heap allocations (its /metrics) per
// iteration, that is for one forwarded ImageStatus and one refused;
// containerd-cpu-µs/call is containerd's per ImageStatus.
//
// Each iteration also asks containerd's ImageStatus through the null
// proxy (test/e2e/testdata/nullproxy): a process that only forwards the
// call, over serve's transport (criproxy.ServerOptions) and serve's
// runtime client. null-added-p50-µs is what that costs over containerd
// (one more process with a gRPC server half and a client half: the floor
// of any proxy of this kind on the machine), over-null-p50-µs what serve
// costs over it (pullguard's own work and its interceptor); the null
// proxy is asked with the spec of serve's presence check, so that both
// get the same request. null-cpu-µs/iter is the null proxy's CPU time
// per iteration (one forwarded ImageStatus).
func BenchmarkServeImageStatusDaemon(b *testing.B) {
	env := setupBench(b)
	ctx := context.Background()
	secure := secureBenchArgs(b)
	d := startServe(b, newRoot(b), append([]string{"-v=0"}, secure...)...) // the last -v wins: serve's default
	awaitSecure(b, d, secure)
	daemon, err := kubeletcri.New(ctx, d.endpoint(), time.Minute)
	require.NoError(b, err)
	b.Cleanup(func() { _ = daemon.Close(ctx) })
	require.NoError(b, env.pullThrough(ctx, daemon))
	// The bare generated client: cri-client would log every refusal.
	conn, err := grpc.NewClient(d.endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	require.NoError(b, err)
	b.Cleanup(func() { _ = conn.Close() })
	bare := runtimeapi.NewImageServiceClient(conn)
	empty := &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{}}
	hop := func() error {
		_, err := bare.ImageStatus(ctx, empty)
		if status.Code(err) != codes.InvalidArgument {
			return fmt.Errorf("ImageStatus with no image: %v, want InvalidArgument", err)
		}
		return nil
	}
	require.NoError(b, hop()) // connected
	// The baseline: a bare forwarding server on serve's transport.
	null, nullPID := startNullProxy(b)
	// The spec serve's presence check gets: the same request bytes.
	nullSpec := kubeletSpec(env.image, benchPods.Add(1))
	forward := func() error {
		st, err := null.ImageStatus(ctx, nullSpec, false)
		if err == nil && st.GetImage() == nil {
			return errors.New("the null proxy reported the image absent")
		}
		return err
	}
	require.NoError(b, forward()) // connected

	servePID, ctrPID := d.proc.cmd.Process.Pid, h.containerd.proc.cmd.Process.Pid
	serveCPU, ctrCPU, nullCPU := processCPU(b, servePID), processCPU(b, ctrPID), processCPU(b, nullPID)
	allocs := metricValue(b, d, "go_memstats_mallocs_total")
	iters, p50 := compareImageStatus(b, env.direct, daemon, env.image, timedCall{"hop", hop}, timedCall{"null-proxy", forward})
	b.ReportMetric(us(p50["null-proxy"]-p50["containerd"]), "null-added-p50-µs")
	b.ReportMetric(us(p50["proxy"]-p50["null-proxy"]), "over-null-p50-µs")
	b.ReportMetric(us(processCPU(b, servePID)-serveCPU)/float64(iters), "serve-cpu-µs/iter")
	b.ReportMetric(us(processCPU(b, nullPID)-nullCPU)/float64(iters), "null-cpu-µs/iter")
	b.ReportMetric((metricValue(b, d, "go_memstats_mallocs_total")-allocs)/float64(iters), "serve-allocs/iter")
	b.ReportMetric(us(processCPU(b, ctrPID)-ctrCPU)/float64(3*iters), "containerd-cpu-µs/call")
}

// startNullProxy starts test/e2e/testdata/nullproxy in front of the
// suite's containerd (built once; stopped by its PID in cleanup) and
// returns a client of it as the kubelet builds one, and its PID.
func startNullProxy(b *testing.B) (criapi.ImageManagerService, int) {
	b.Helper()
	nullOnce.Do(func() {
		nullBinary = filepath.Join(h.dir, "nullproxy")
		if out, err := exec.Command("go", "build", "-o", nullBinary, "./testdata/nullproxy").CombinedOutput(); err != nil {
			nullErr = fmt.Errorf("go build the null proxy: %v\n%s", err, out)
		}
	})
	require.NoError(b, nullErr)
	dir := b.TempDir()
	log, err := newLogSink(filepath.Join(dir, "nullproxy.log"))
	require.NoError(b, err)
	socket := filepath.Join(dir, "null.sock")
	p, err := startProcessEnv(log, proxyEnv(), nullBinary, "--listen", socket, "--runtime", h.containerd.endpoint())
	require.NoError(b, err)
	b.Cleanup(p.stop)
	require.True(b, log.waitFor(0, "nullproxy: serving", 60*time.Second), "the null proxy did not start:\n%s", log.all())
	ctx := context.Background()
	c, err := kubeletcri.New(ctx, "unix://"+socket, time.Minute)
	require.NoError(b, err)
	b.Cleanup(func() { _ = c.Close(ctx) })
	return c, p.cmd.Process.Pid
}

// proxyEnv is what the suite adds to the environment of every serve it
// starts and of the null proxy, from PULLGUARD_BENCH_PROXY_ENV (NAME=VALUE
// words, e.g. "GOMAXPROCS=1", for the hop's benchmarks: docs/benchmarks.md,
// "The hop"); none when unset, as in CI.
func proxyEnv() []string { return strings.Fields(os.Getenv("PULLGUARD_BENCH_PROXY_ENV")) }

var (
	nullOnce   sync.Once
	nullBinary string
	nullErr    error
)

// processCPU is a process's CPU time so far, user and system, from
// /proc/PID/stat (in clock ticks of 10 ms: meaningful over thousands of
// calls).
func processCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(b, err)
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	require.Greater(b, len(f), 12, "/proc/%d/stat", pid)
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(b, err)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// timedCall is a call compareImageStatus times in every iteration too,
// reported as p50-µs/NAME and p99-µs/NAME.
type timedCall struct {
	name string
	call func() error
}

// compareImageStatus asks ImageStatus of image straight to containerd and
// through a proxy in every iteration, with each of extras, in rotating
// order, and reports the p50 and p99 of each and added-p50-µs, the
// difference of the proxy's and containerd's p50s. Through the proxy, a
// pod's presence check asks (the kubelet's annotated spec), and the image
// must be reported absent to it (it is hidden). It returns the number of
// iterations and the p50 of each call by name ("containerd", "proxy" and
// extras').
func compareImageStatus(b *testing.B, direct, proxy criapi.ImageManagerService, image string, extras ...timedCall) (int, map[string]time.Duration) {
	spec := &runtimeapi.ImageSpec{Image: image}
	presence := kubeletSpec(image, benchPods.Add(1)) // a pod that shows nothing
	ctx := context.Background()
	calls := append([]timedCall{
		{"containerd", func() error {
			_, err := direct.ImageStatus(ctx, spec, false)
			return err
		}},
		{"proxy", func() error {
			st, err := proxy.ImageStatus(ctx, presence, false)
			if err == nil && st.GetImage() != nil {
				return errors.New("the proxy reported a credential-pulled image present")
			}
			return err
		}},
	}, extras...)
	lat := make([][]time.Duration, len(calls))
	i := 0
	for b.Loop() {
		for k := range calls {
			j := (i + k) % len(calls)
			start := time.Now()
			err := calls[j].call()
			lat[j] = append(lat[j], time.Since(start))
			if err != nil {
				b.Fatalf("%s: %v", calls[j].name, err)
			}
		}
		i++
	}
	p50 := map[string]time.Duration{}
	for j, c := range calls {
		p50[c.name] = reportPercentiles(b, lat[j], c.name)
	}
	b.ReportMetric(us(p50["proxy"]-p50["containerd"]), "added-p50-µs")
	return i, p50
}

// BenchmarkServePull: a PullImage answered from a record, in the kubelet's
// sequence for an IfNotPresent container whose image needs the pod's
// credentials, against containerd's own ImageStatus of the same image
// (asked in the same iteration, so under the same load).
//
// The kubelet's sequence (k8s.io/kubernetes v1.36, pkg/kubelet/images and
// pkg/kubelet/kuberuntime): imageManager.EnsureImageExists first asks
// imagePullPrecheck, which for IfNotPresent and Never calls GetImageRef,
// an ImageStatus of the image; reported absent, it calls pullImage, and
// the puller calls PullImage (kuberuntime's PullImage tries the pod's
// credentials in turn) and, after a successful pull, GetImageSize, another
// ImageStatus of the same spec; then container creation
// (generateContainerConfig) asks getImageUser, an ImageStatus of
// container.Image (a bare spec). So every iteration here is a new pod's:
// ImageStatus (presence, annotated), PullImage (timed, annotated),
// ImageStatus (size, annotated), ImageStatus (user, bare). The proxy's
// "absent" answer to the presence check caches the image's status, and
// the PullImage that follows uses it once, asking containerd nothing; the
// benchmark fails if it asked containerd anything.
func BenchmarkServePull(b *testing.B) {
	env := setupBench(b)
	before := env.backend.statuses.Load() + env.backend.pulls.Load()
	pulls := kubeletPulls(b, env.proxy, env.direct, env)
	// Each iteration's three ImageStatus calls are forwarded; the pull
	// must not be.
	if calls := env.backend.statuses.Load() + env.backend.pulls.Load() - before; calls != int64(3*pulls) {
		b.Fatalf("%d iterations made %d calls to containerd, want %d (the answered pulls none)", pulls, calls, 3*pulls)
	}
}

// BenchmarkServePullDaemon is BenchmarkServePull through the real
// `pullguard serve` process (see BenchmarkServeImageStatusDaemon). It
// fails unless serve answered every timed pull from its record (its own
// decision metrics).
func BenchmarkServePullDaemon(b *testing.B) {
	env := setupBench(b)
	ctx := context.Background()
	secure := secureBenchArgs(b)
	d := startServe(b, newRoot(b), append([]string{"-v=0"}, secure...)...)
	awaitSecure(b, d, secure)
	daemon, err := kubeletcri.New(ctx, d.endpoint(), time.Minute)
	require.NoError(b, err)
	b.Cleanup(func() { _ = daemon.Close(ctx) })
	require.NoError(b, env.pullThrough(ctx, daemon))
	const answered = `pullguard_criproxy_decisions_total{method="PullImage",outcome="answered",`
	before := metricSum(b, d, answered)
	pulls := kubeletPulls(b, daemon, env.direct, env)
	if got := metricSum(b, d, answered) - before; got != float64(pulls) {
		b.Fatalf("serve answered %v of %d pulls from its record, want all", got, pulls)
	}
}

// metricSum adds up the samples of the daemon's /metrics whose series
// starts with prefix (every reason of one outcome, say).
func metricSum(b *testing.B, d *serveDaemon, prefix string) float64 {
	resp, err := http.Get("http://" + d.metrics + "/metrics")
	require.NoError(b, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b, err)
	var sum float64
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		require.NoError(b, err, l)
		sum += v
	}
	return sum
}

// kubeletPulls times PullImage through proxy in the kubelet's sequence for
// a new pod's IfNotPresent container (the annotated presence check,
// reported absent; the annotated PullImage, timed; the annotated size
// look-up; the bare user look-up at container creation, both answered as
// the runtime answers) and containerd's own ImageStatus in the same
// iterations; it returns the number of iterations.
func kubeletPulls(b *testing.B, proxy, direct criapi.ImageManagerService, env *benchProxy) int {
	bare := &runtimeapi.ImageSpec{Image: env.image}
	ctx := context.Background()
	var pulls, directLat []time.Duration
	for b.Loop() {
		spec := kubeletSpec(env.image, benchPods.Add(1))
		st, err := proxy.ImageStatus(ctx, spec, false) // GetImageRef
		if err != nil {
			b.Fatal(err)
		}
		if st.GetImage() != nil {
			b.Fatal("a credential-pulled image was reported present to a new pod")
		}
		start := time.Now()
		if _, err := proxy.PullImage(ctx, spec, env.auth, env.pod); err != nil {
			b.Fatal(err)
		}
		pulls = append(pulls, time.Since(start))
		if st, err := proxy.ImageStatus(ctx, spec, false); err != nil || st.GetImage() == nil { // GetImageSize
			b.Fatalf("the size look-up after the pod's pull: %v, %v", st, err)
		}
		if st, err := proxy.ImageStatus(ctx, bare, false); err != nil || st.GetImage() == nil { // getImageUser
			b.Fatalf("the user look-up: %v, %v", st, err)
		}
		start = time.Now()
		if _, err := direct.ImageStatus(ctx, bare, false); err != nil {
			b.Fatal(err)
		}
		directLat = append(directLat, time.Since(start))
	}
	reportPercentiles(b, pulls, "answered-pull")
	reportPercentiles(b, directLat, "containerd-ImageStatus")
	return len(pulls)
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
			spec := kubeletSpec(env.image, benchPods.Add(1))
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

// registerBenchMetrics registers the proxy's and the tracker's metrics
// with component-base's legacy registry, as serve does: unregistered
// metrics of component-base are no-ops and would cost nothing.
func registerBenchMetrics() {
	for _, m := range append(criproxy.Metrics(), credtracker.Metrics()...) {
		_ = legacyregistry.Register(m) // already registered: harmless
	}
}

// reportPercentiles reports the p50 and p99 of lat, in µs, labelled
// what, and returns the p50.
func reportPercentiles(b *testing.B, lat []time.Duration, what string) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	p50 := lat[len(lat)/2]
	b.ReportMetric(us(p50), "p50-µs/"+what)
	b.ReportMetric(us(lat[len(lat)*99/100]), "p99-µs/"+what)
	return p50
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
