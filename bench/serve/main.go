//go:build linux

// Command bench-serve measures `pullguard serve` as a process on a node:
// its memory (VmRSS, VmHWM) and CPU time (utime + stime) after start-up
// with N images in the runtime and ten credential records per image in its
// store, its time from exec to its first answer and through the kubelet's
// first full ListImages, and the same after bursts of pods starting at
// once. `make bench-serve` runs it; it is not part of `make test`.
// docs/benchmarks.md ("serve on a node") has the figures.
//
// The runtime is a fake CRI image service in this process, on a unix
// socket (a separate process from serve, as containerd is), so that serve's
// figures are serve's alone and an image count of 10 000 costs nothing to
// set up. The store is written through the tracker's API before serve
// starts. serve's first start (the switch-over from the kubelet's records,
// which lists the images and marks them) is measured once; the measured
// restarts each start from a copy of the store that first start left.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

type config struct {
	bin                  string
	sizes                []int
	credsPerImage        int
	rounds, pods, bursts int
	dir, buildDir        string
	smaps                int
	keep                 bool
	pprof                string
}

func main() {
	var c config
	var sizes string
	flag.StringVar(&c.bin, "pullguard", "bin/pullguard", "the pullguard binary to run as serve")
	flag.StringVar(&sizes, "images", "1000,10000", "image counts in the runtime, comma-separated")
	flag.IntVar(&c.credsPerImage, "creds", 10, "credential records per image (tenants that pulled every image)")
	flag.IntVar(&c.rounds, "rounds", 3, "measured restarts per size")
	flag.IntVar(&c.pods, "pods", 64, "pods per burst")
	flag.IntVar(&c.bursts, "bursts", 5, "bursts of pods per restart")
	flag.StringVar(&c.dir, "dir", os.TempDir(), "where serve's root directories go (a node's disk)")
	flag.StringVar(&c.buildDir, "build-dir", "/dev/shm", "where the stores are written before they are copied under -dir (tmpfs: each credential record is a durable transaction)")
	flag.IntVar(&c.smaps, "smaps", 0, "print serve's N largest mappings by resident memory after each start-up")
	flag.BoolVar(&c.keep, "keep", false, "keep serve's root directories (stores and serve.log; the path is printed), to profile a start-up on them")
	flag.StringVar(&c.pprof, "pprof", "", "save serve's heap profiles after start-up and after the pods in this directory; needs a serve build that serves /debug/pprof/ on its metrics address (pullguard's does not)")
	flag.Parse()
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "-images: %q is not a positive count\n", s)
			os.Exit(2)
		}
		c.sizes = append(c.sizes, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-serve:", err)
		os.Exit(1)
	}
}

// result is one start of serve.
type result struct {
	firstAnswer, list, startup time.Duration
	afterStart, afterPods      procStats
	heapStart, heapPods        float64 // go_memstats_heap_inuse_bytes
	startCPU, podsCPU          time.Duration
	status, pull, pod          []time.Duration
	startCalls, podCalls       calls // what serve asked the runtime
}

func run(ctx context.Context, c config) error {
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("-pullguard: %w (make bench-serve builds it)", err)
	}
	fmt.Printf("bench-serve: %s, %d credential records per image, %d rounds, %d bursts of %d pods; %s\n",
		bin, c.credsPerImage, c.rounds, c.bursts, c.pods, time.Now().UTC().Format(time.RFC3339))
	for _, n := range c.sizes {
		if err := runSize(ctx, c, bin, n); err != nil {
			return fmt.Errorf("%d images: %w", n, err)
		}
	}
	return nil
}

func runSize(ctx context.Context, c config, bin string, n int) error {
	work, err := os.MkdirTemp(c.dir, "bench-serve-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Printf("keeping %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	sockDir, err := os.MkdirTemp("", "pgbs") // unix socket paths are short
	if err != nil {
		return err
	}
	defer os.RemoveAll(sockDir)

	rt := newFakeRuntime(n)
	rtSocket := filepath.Join(sockDir, "runtime.sock")
	if err := rt.serve(rtSocket); err != nil {
		return err
	}
	defer rt.stop()
	ts := tenants(c.credsPerImage)

	build, err := os.MkdirTemp(c.buildDir, "bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(build)
	t0 := time.Now()
	if err := populate(ctx, build, rt, ts); err != nil {
		return fmt.Errorf("writing the store: %w", err)
	}
	firstRoot := filepath.Join(work, "first")
	if err := copyTree(build, firstRoot); err != nil {
		return err
	}
	storeBefore := fileSize(filepath.Join(firstRoot, podworkers.TrackerDir, credtracker.StoreFile))
	fmt.Printf("\n%d images, %d credential records (%d per image) written in %s; store %.1f MiB\n",
		n, n*len(ts), len(ts), time.Since(t0).Round(time.Millisecond), float64(dirSize(firstRoot))/(1<<20))

	// The first start: the switch-over, then stopped. Its root directory
	// is the template of the restarts.
	first, err := measure(ctx, c, bin, firstRoot, sockDir, rtSocket, rt, ts, n, 0)
	if err != nil {
		return fmt.Errorf("first start: %w", err)
	}
	printResult("first start", first)
	store := filepath.Join(firstRoot, podworkers.TrackerDir, credtracker.StoreFile)
	fmt.Printf("  %-11s store file %.1f MiB before the first start, %.1f MiB after it (the switch-over rewrote every record)\n",
		"", float64(storeBefore)/(1<<20), float64(fileSize(store))/(1<<20))
	var rs []result
	for r := range c.rounds {
		root := filepath.Join(work, fmt.Sprintf("round-%d", r))
		if err := copyTree(firstRoot, root); err != nil {
			return err
		}
		res, err := measure(ctx, c, bin, root, sockDir, rtSocket, rt, ts, n, c.bursts)
		if err != nil {
			return fmt.Errorf("restart %d: %w", r+1, err)
		}
		printResult(fmt.Sprintf("restart %d", r+1), res)
		rs = append(rs, res)
		if !c.keep {
			_ = os.RemoveAll(root)
		}
	}
	if pulls := rt.pulls.Load(); pulls != 0 {
		return fmt.Errorf("serve forwarded %d pulls to the runtime; every pull should have been answered from a record", pulls)
	}
	printSummary(n, rs)
	return nil
}

// measure starts serve on root, times its first answer and the first full
// ListImages, reads its memory and CPU, then runs bursts of pods and reads
// them again; serve is stopped by its PID before it returns.
func measure(ctx context.Context, c config, bin, root, sockDir, rtSocket string, rt *fakeRuntime, ts []tenant, n, bursts int) (res result, err error) {
	before := rt.calls()
	d, err := startServe(bin, root, sockDir, rtSocket)
	if err != nil {
		return res, err
	}
	defer d.stop()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	var conn *grpc.ClientConn
	if res.firstAnswer, conn, err = d.firstAnswer(sctx); err != nil {
		return res, err
	}
	defer conn.Close()
	s := serveStart{c: c, d: d, rt: rt, n: n, root: root}
	if err := s.measureStartup(sctx, conn, before, &res); err != nil {
		return res, err
	}
	if bursts == 0 {
		return res, nil
	}
	return res, s.measurePods(sctx, ts, bursts, &res)
}

// serveStart is one start of serve under measure: serve d, on root, in
// front of rt, which holds n images.
type serveStart struct {
	c    config
	d    *daemon
	rt   *fakeRuntime
	n    int
	root string
}

// measureStartup fills in res's start-up figures, once serve answered
// first on conn: the kubelet's first full ListImages through conn (it must
// list every image) and the start-up's end; then serve's memory, CPU and
// what it asked the runtime since before (the runtime's calls before
// serve started), its heap, and, as c asks, its largest mappings and a
// heap profile.
func (s serveStart) measureStartup(ctx context.Context, conn *grpc.ClientConn, before calls, res *result) error {
	// The kubelet's first full list (its image GC cache, the pull
	// manager's initialization): serve forwards it and prunes its records
	// against it.
	t := time.Now()
	list, err := runtimeapi.NewImageServiceClient(conn).ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return fmt.Errorf("first ListImages: %w", err)
	}
	res.list, res.startup = time.Since(t), time.Since(s.d.started)
	if len(list.GetImages()) != s.n {
		return fmt.Errorf("serve listed %d images, want %d", len(list.GetImages()), s.n)
	}
	pid := s.d.cmd.Process.Pid
	if res.afterStart, err = readProc(pid); err != nil {
		return err
	}
	res.startCPU = res.afterStart.cpu
	res.startCalls = s.rt.calls().minus(before)
	if res.heapStart, err = s.d.metric("go_memstats_heap_inuse_bytes"); err != nil {
		return err
	}
	if s.c.smaps > 0 {
		top, err := topMappings(pid, s.c.smaps)
		if err != nil {
			return err
		}
		fmt.Print(top)
	}
	return s.saveHeapProfile("start")
}

// measurePods runs bursts bursts of c.pods pods of the tenants ts
// against serve, as the kubelet calls it, and fills in res's figures
// after them: the latencies, what serve asked the runtime, its memory,
// CPU and heap, and, as c asks, a heap profile. serve must have answered
// every pull from its records.
func (s serveStart) measurePods(ctx context.Context, ts []tenant, bursts int, res *result) error {
	client, err := criruntime.NewRemote(ctx, "unix://"+s.d.socket, time.Minute) // the kubelet's call semantics
	if err != nil {
		return err
	}
	defer client.Close(context.Background())
	const answered = `pullguard_criproxy_decisions_total{method="PullImage",outcome="answered",`
	before, err := s.d.metric(answered)
	if err != nil {
		before = 0 // no answer yet: the series does not exist
	}
	beforeCalls := s.rt.calls()
	rng := rand.New(rand.NewPCG(uint64(s.n), 1))
	for range bursts {
		lat, err := burst(ctx, client, s.rt, ts, s.c.pods, rng)
		if err != nil {
			return err
		}
		for _, l := range lat {
			res.status, res.pull, res.pod = append(res.status, l.status), append(res.pull, l.pull), append(res.pod, l.pod)
		}
	}
	res.podCalls = s.rt.calls().minus(beforeCalls)
	if res.afterPods, err = readProc(s.d.cmd.Process.Pid); err != nil {
		return err
	}
	res.podsCPU = res.afterPods.cpu - res.afterStart.cpu
	if res.heapPods, err = s.d.metric("go_memstats_heap_inuse_bytes"); err != nil {
		return err
	}
	if err := s.saveHeapProfile("pods"); err != nil {
		return err
	}
	got, err := s.d.metric(answered)
	if err != nil {
		return err
	}
	if want := float64(bursts * s.c.pods); got-before != want {
		return fmt.Errorf("serve answered %v pulls from its records, want %v", got-before, want)
	}
	return nil
}

// saveHeapProfile saves serve's heap profile after phase ("start",
// "pods") into c.pprof, if set.
func (s serveStart) saveHeapProfile(phase string) error {
	return s.d.saveHeapProfile(s.c.pprof, fmt.Sprintf("heap-%d-%s-%s.pb.gz", s.n, filepath.Base(s.root), phase))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func pct(lat []time.Duration, p int) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func printResult(what string, r result) {
	fmt.Printf("  %-11s first answer %7.1f ms, first ListImages %6.1f ms, start-up %7.1f ms, CPU %5.0f ms; RSS %5.1f MiB (anon %5.1f, file %5.1f), VmHWM %5.1f MiB, heap in use %5.1f MiB\n",
		what, ms(r.firstAnswer), ms(r.list), ms(r.startup), ms(r.startCPU), mib(r.afterStart.rss), mib(r.afterStart.anon), mib(r.afterStart.file), mib(r.afterStart.hwm), r.heapStart/(1<<20))
	fmt.Printf("  %-11s serve asked the runtime: %s\n", "", r.startCalls)
	if len(r.pod) == 0 {
		return
	}
	fmt.Printf("  %-11s after %d pods: RSS %5.1f MiB, VmHWM %5.1f MiB, heap in use %5.1f MiB, CPU %5.0f ms; p50/p99 ms: ImageStatus %.2f/%.2f, PullImage %.2f/%.2f, pod %.2f/%.2f\n",
		"", len(r.pod), mib(r.afterPods.rss), mib(r.afterPods.hwm), r.heapPods/(1<<20), ms(r.podsCPU),
		ms(pct(r.status, 50)), ms(pct(r.status, 99)), ms(pct(r.pull, 50)), ms(pct(r.pull, 99)), ms(pct(r.pod, 50)), ms(pct(r.pod, 99)))
	fmt.Printf("  %-11s the pods' calls asked the runtime: %s\n", "", r.podCalls)
}

// printSummary prints the median and the range over the rounds of each
// figure, as a markdown table.
func printSummary(n int, rs []result) {
	fmt.Printf("\n| %d images | median | range |\n|---|---|---|\n", n)
	row := func(what string, unit string, f func(result) float64) {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		fmt.Printf("| %s | %.1f %s | %.1f–%.1f |\n", what, v[len(v)/2], unit, v[0], v[len(v)-1])
	}
	row("exec → first answer", "ms", func(r result) float64 { return ms(r.firstAnswer) })
	row("first full ListImages", "ms", func(r result) float64 { return ms(r.list) })
	row("start-up (exec → first list answered)", "ms", func(r result) float64 { return ms(r.startup) })
	row("CPU of start-up", "ms", func(r result) float64 { return ms(r.startCPU) })
	row("RSS after start-up", "MiB", func(r result) float64 { return mib(r.afterStart.rss) })
	row("VmHWM after start-up", "MiB", func(r result) float64 { return mib(r.afterStart.hwm) })
	row("Go heap in use after start-up", "MiB", func(r result) float64 { return r.heapStart / (1 << 20) })
	row("RSS after the pods", "MiB", func(r result) float64 { return mib(r.afterPods.rss) })
	row("VmHWM after the pods", "MiB", func(r result) float64 { return mib(r.afterPods.hwm) })
	row("CPU of the pods", "ms", func(r result) float64 { return ms(r.podsCPU) })
	row("pod ImageStatus p50", "ms", func(r result) float64 { return ms(pct(r.status, 50)) })
	row("pod ImageStatus p99", "ms", func(r result) float64 { return ms(pct(r.status, 99)) })
	row("pod PullImage p50", "ms", func(r result) float64 { return ms(pct(r.pull, 50)) })
	row("pod PullImage p99", "ms", func(r result) float64 { return ms(pct(r.pull, 99)) })
	row("pod (both calls) p50", "ms", func(r result) float64 { return ms(pct(r.pod, 50)) })
	row("pod (both calls) p99", "ms", func(r result) float64 { return ms(pct(r.pod, 99)) })
}
