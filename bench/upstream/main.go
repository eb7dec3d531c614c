package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
)

// config is what the command line sets.
type config struct {
	sizes      []int
	rounds     int
	decideTime time.Duration
	writeTime  time.Duration
	minWrites  int
	dir        string
	fastDir    string
}

func main() {
	var cfg config
	sizes := flag.String("sizes", "100,1000,10000,100000", "numbers of records, comma-separated")
	flag.IntVar(&cfg.rounds, "rounds", 5, "rounds; each measures every figure once, interleaving the two implementations")
	flag.DurationVar(&cfg.decideTime, "decide-time", 150*time.Millisecond, "CPU time per decision measurement (after a tenth of it to warm up)")
	flag.DurationVar(&cfg.writeTime, "write-time", 300*time.Millisecond, "time per write measurement")
	flag.IntVar(&cfg.minWrites, "min-writes", 3, "writes per write measurement, at least")
	flag.StringVar(&cfg.dir, "dir", "", "directory under which both stores (the kubelet's root and pullguard's state) are created for the run and removed after it; default: $TMPDIR")
	flag.StringVar(&cfg.fastDir, "fast-dir", "/dev/shm", "tmpfs where pullguard's stores are first written (each pull is a durable transaction), then copied under -dir; empty: write them under -dir")
	flag.Parse()
	var err error
	if cfg.sizes, err = parseSizes(*sizes); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if cfg.rounds < 1 {
		fmt.Fprintln(os.Stderr, "-rounds must be at least 1")
		os.Exit(2)
	}
	if err := run(context.Background(), cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench-upstream:", err)
		os.Exit(1)
	}
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 10_000_000 {
			return nil, fmt.Errorf("invalid size %q in -sizes: want a number of records from 1 to 10000000", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// subject is one number of records, both implementations over it.
type subject struct {
	n       int
	up      *upstream
	pg      *pullguard
	uniform stream
	hot     stream // nil when every record is in the hot set
}

// run writes the records, measures the rounds and prints the tables to out
// (progress to log).
func run(ctx context.Context, cfg config, out, log io.Writer) (err error) {
	// Count decisions as a node does: with both projects' metrics
	// registered (the kubelet's register themselves).
	registerPullguardMetrics()
	ctx = klog.NewContext(ctx, klog.Background())

	// A new directory each run, removed at the end, so that nothing left by
	// an earlier run counts.
	base, err := os.MkdirTemp(cfg.dir, "pullguard-bench-upstream-")
	if err != nil {
		return fmt.Errorf("failed to create a work directory: %w", err)
	}
	defer os.RemoveAll(base)
	fast := base
	if cfg.fastDir != "" {
		if fast, err = os.MkdirTemp(cfg.fastDir, "pullguard-bench-upstream-"); err != nil {
			fmt.Fprintf(log, "no tmpfs at %s (%v): writing pullguard's stores under %s\n", cfg.fastDir, err, base)
			fast = base
		} else {
			defer os.RemoveAll(fast)
		}
	}

	env := describe()
	res := newResults(cfg.sizes)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2535))
	var subjects []*subject
	for _, n := range cfg.sizes {
		start := time.Now()
		s := &subject{n: n, uniform: uniformStream(rng, n)}
		if n > hotSetSize {
			s.hot = hotStream(rng, n)
		}
		if s.up, err = newUpstream(filepath.Join(base, fmt.Sprintf("kubelet-%d", n)), n); err != nil {
			return err
		}
		if s.pg, err = newPullguard(ctx, filepath.Join(fast, fmt.Sprintf("pullguard-%d-pristine", n)), filepath.Join(base, fmt.Sprintf("pullguard-%d", n)), n); err != nil {
			return err
		}
		if err := res.disk(s); err != nil {
			return err
		}
		subjects = append(subjects, s)
		fmt.Fprintf(log, "wrote %d records into both stores in %s\n", n, time.Since(start).Round(time.Millisecond))
	}
	for r := range cfg.rounds {
		start := time.Now()
		for _, s := range subjects {
			if err := round(ctx, cfg, r, s, rng, res); err != nil {
				return fmt.Errorf("round %d, %d records: %w", r+1, s.n, err)
			}
		}
		fmt.Fprintf(log, "round %d of %d: %s\n", r+1, cfg.rounds, time.Since(start).Round(time.Millisecond))
	}
	env.loadAfter = loadAverage()
	res.print(out, cfg, env)
	return nil
}

// round measures every figure of one subject once.
func round(ctx context.Context, cfg config, r int, s *subject, rng *rand.Rand, res *results) error {
	if err := s.pg.reset(); err != nil {
		return err
	}
	if err := measureOpens(ctx, r, s, res); err != nil {
		return err
	}
	if r == 0 {
		if err := checkRefusals(ctx, s, rng); err != nil {
			return err
		}
	}
	if err := measureDecisions(ctx, cfg, r, s, rng, res); err != nil {
		return err
	}
	upstreamWrites, err := measureWrites(ctx, cfg, r, s, res)
	if err != nil {
		return err
	}
	if err := s.pg.close(); err != nil {
		return err
	}
	return s.up.close(upstreamWrites)
}

// measureOpens opens both implementations' stores, timing each and reading
// its heap, the upstream first in even rounds r, pullguard first in odd
// ones.
func measureOpens(ctx context.Context, r int, s *subject, res *results) error {
	opens := []func() error{
		func() error { return res.open(upstreamSide, s.up.n, func() error { return s.up.open(ctx) }) },
		func() error { return res.open(pullguardSide, s.pg.n, func() error { return s.pg.open(ctx) }) },
	}
	if r%2 == 1 {
		opens[0], opens[1] = opens[1], opens[0]
	}
	for _, open := range opens {
		if err := open(); err != nil {
			return err
		}
	}
	return nil
}

// measureDecisions measures, for each workload of s, the harness loop and
// the decision loop of each implementation, in alternating order (the
// upstream first in even rounds r).
func measureDecisions(ctx context.Context, cfg config, r int, s *subject, rng *rand.Rand, res *results) error {
	workloads := []struct {
		name string
		s    stream
	}{{uniformWorkload, s.uniform}, {hotWorkload, s.hot}}
	for _, w := range workloads {
		if w.s == nil {
			continue
		}
		type pair struct {
			side            string
			harness, decide loop
		}
		pairs := []pair{
			{upstreamSide,
				func(st stream, from, count int) int { return s.up.harness(ctx, st, from, count) },
				func(st stream, from, count int) int { return s.up.decide(ctx, st, from, count) }},
			{pullguardSide, s.pg.harness, s.pg.decide},
		}
		if r%2 == 1 {
			pairs[0], pairs[1] = pairs[1], pairs[0]
		}
		for _, p := range pairs {
			h, err := perOp(p.harness, w.s, rng, cfg.decideTime)
			if err != nil {
				return fmt.Errorf("%s harness, %s: %w", p.side, w.name, err)
			}
			d, err := perOp(p.decide, w.s, rng, cfg.decideTime)
			if err != nil {
				return fmt.Errorf("%s decisions, %s: %w", p.side, w.name, err)
			}
			res.decision(s.n, p.side, w.name, d, h)
		}
	}
	return nil
}

// measureWrites measures each implementation's writes, in alternating
// order (the upstream first in even rounds r), and checks that the last
// write of each took. It returns how many records the upstream wrote,
// which its close removes.
func measureWrites(ctx context.Context, cfg config, r int, s *subject, res *results) (upstreamWrites int, err error) {
	type writer struct {
		side    string
		write   func(k int) error
		written func(k int) bool
	}
	writers := []writer{
		{upstreamSide, func(k int) error { return s.up.write(ctx, k) }, func(k int) bool { return s.up.written(ctx, k) }},
		{pullguardSide, s.pg.write, s.pg.written},
	}
	if r%2 == 1 {
		writers[0], writers[1] = writers[1], writers[0]
	}
	for _, w := range writers {
		ns, k, err := writesPer(w.write, cfg.writeTime, cfg.minWrites)
		if w.side == upstreamSide {
			upstreamWrites = k
		}
		if err != nil {
			return 0, fmt.Errorf("%s writes: %w", w.side, err)
		}
		if !w.written(k - 1) {
			return 0, fmt.Errorf("%s writes: the last record written is not known afterwards", w.side)
		}
		res.write(s.n, w.side, ns, k)
	}
	return upstreamWrites, nil
}

// checkRefusals makes sure both implementations refuse a pod that holds
// another tenant's secret, for the first, the last and some records in
// between: the decisions measured then are credential matches, not images
// taken for preloaded ones because their records were not found.
func checkRefusals(ctx context.Context, s *subject, rng *rand.Rand) error {
	sample := []int{0, s.n - 1}
	for range 30 {
		sample = append(sample, rng.IntN(s.n))
	}
	for _, i := range sample {
		if !s.up.refuses(ctx, i) {
			return fmt.Errorf("the kubelet's pull manager lets another tenant's pod use image %d: its record was not read", i)
		}
		if !s.pg.refuses(i) {
			return fmt.Errorf("pullguard lets another tenant's pod use image %d", i)
		}
	}
	return nil
}

// registerPullguardMetrics registers pullguard's metrics, as a node does,
// in a registry of their own: some carry the kubelet's names
// (kubelet_imagemanager_ondisk_pulledrecords, ...), which the upstream
// pull manager registers in the legacy registry of this same process.
func registerPullguardMetrics() {
	registered.Do(func() { metrics.NewKubeRegistry().MustRegister(credtracker.Metrics()...) })
}
