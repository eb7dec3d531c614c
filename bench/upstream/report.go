package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

var registered sync.Once

// The two implementations and the two workloads, as the tables name them.
const (
	upstreamSide    = "upstream"
	pullguardSide   = "pullguard"
	uniformWorkload = "uniform"
	hotWorkload     = "hot"
)

// key names one figure of one number of records.
type key struct {
	n              int
	side, quantity string
}

// results collects the rounds' figures.
type results struct {
	sizes   []int
	figures map[key]samples
	counts  map[key]int
}

func newResults(sizes []int) *results {
	return &results{sizes: sizes, figures: map[key]samples{}, counts: map[key]int{}}
}

func (r *results) add(k key, v float64) { r.figures[k] = append(r.figures[k], v) }

// open measures one start-up and the heap it leaves, per record.
func (r *results) open(side string, n int, open func() error) error {
	elapsed, heap, err := timedOpen(open)
	if err != nil {
		return err
	}
	r.add(key{n, side, "startup"}, elapsed.wall)
	r.add(key{n, side, "startup-cpu"}, elapsed.cpu)
	r.add(key{n, side, "heap"}, float64(heap)/float64(n))
	r.add(key{n, side, "heap-total"}, float64(heap))
	return nil
}

// decision records one round's decision and harness costs; the figures
// are CPU time, the "wall-" ones wall-clock time, both net of the harness.
func (r *results) decision(n int, side, workload string, decide, harness cost) {
	r.add(key{n, side, "decide-" + workload}, decide.cpu-harness.cpu)
	r.add(key{n, side, "harness-" + workload}, harness.cpu)
	r.add(key{n, side, "wall-decide-" + workload}, decide.wall-harness.wall)
}

func (r *results) write(n int, side string, ns float64, count int) {
	r.add(key{n, side, "write"}, ns)
	r.counts[key{n, side, "write"}] += count
}

func (r *results) disk(s *subject) error {
	up, err := s.up.diskBytes()
	if err != nil {
		return fmt.Errorf("failed to measure the kubelet's records on disk: %w", err)
	}
	pg, err := s.pg.diskBytes()
	if err != nil {
		return fmt.Errorf("failed to measure pullguard's store: %w", err)
	}
	r.add(key{s.n, upstreamSide, "disk"}, float64(up)/float64(s.n))
	r.add(key{s.n, pullguardSide, "disk"}, float64(pg)/float64(s.n))
	return nil
}

// env describes the machine and the build.
type env struct {
	goVersion, cpu, kubernetes string
	procs, cpus                int
	loadBefore, loadAfter      string
	started                    time.Time
}

func describe() env {
	e := env{goVersion: runtime.Version(), procs: runtime.GOMAXPROCS(0), cpus: runtime.NumCPU(), started: time.Now(), loadBefore: loadAverage(), kubernetes: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "k8s.io/kubernetes" {
				e.kubernetes = m.Version
			}
		}
	}
	e.cpu = "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
				e.cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	return e
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// print writes the tables.
func (r *results) print(w io.Writer, cfg config, e env) {
	fmt.Fprintf(w, "## pullguard against the upstream kubelet's pull manager\n\n")
	fmt.Fprintf(w, "k8s.io/kubernetes %s (pkg/kubelet/images/pullmanager, built as the kubelet builds it) and pullguard's credtracker, in one process.\n", e.kubernetes)
	fmt.Fprintf(w, "%s, %s, GOMAXPROCS %d of %d CPUs; load average %s before, %s after; %d rounds, %s of CPU time per decision measurement; started %s.\n",
		e.goVersion, e.cpu, e.procs, e.cpus, e.loadBefore, e.loadAfter, cfg.rounds, cfg.decideTime, e.started.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Each cell: median of the rounds (lowest–highest).\n\n")

	fmt.Fprintf(w, "### Decisions: image present, the pod holds the secret that pulled it (CPU time per decision, harness cost subtracted)\n\n")
	fmt.Fprintf(w, "| records | upstream (uniform) | pullguard (uniform) | pullguard (%s hot images) | upstream (%s hot images) | upstream ÷ pullguard, uniform | upstream ÷ pullguard, hot |\n", count(hotSetSize), count(hotSetSize))
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|\n")
	for _, n := range r.sizes {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", count(n),
			r.cell(n, upstreamSide, "decide-uniform", duration), r.cell(n, pullguardSide, "decide-uniform", duration),
			r.cell(n, pullguardSide, "decide-hot", duration), r.cell(n, upstreamSide, "decide-hot", duration),
			r.ratio(n, "decide-uniform"), r.ratio(n, "decide-hot"))
	}
	fmt.Fprintf(w, "\nUniform: requests drawn uniformly over all N records. Hot: over %s records picked at random (\"–\": N ≤ %s, the hot set would be every record). CPU time is the whole process's (the garbage collector's included), so other processes' load does not count; one goroutine decides.\n\n", count(hotSetSize), count(hotSetSize))
	fmt.Fprintf(w, "The same decisions on the wall clock (harness subtracted; stretched by whatever else the machine runs):\n\n")
	fmt.Fprintf(w, "| records | upstream (uniform) | pullguard (uniform) | pullguard (hot) | upstream (hot) |\n|---|---|---|---|---|\n")
	for _, n := range r.sizes {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", count(n),
			r.cell(n, upstreamSide, "wall-decide-uniform", duration), r.cell(n, pullguardSide, "wall-decide-uniform", duration),
			r.cell(n, pullguardSide, "wall-decide-hot", duration), r.cell(n, upstreamSide, "wall-decide-hot", duration))
	}
	fmt.Fprintf(w, "\n")

	fmt.Fprintf(w, "### The harness's own cost (reading the next request and passing it on; CPU time), subtracted above\n\n")
	fmt.Fprintf(w, "| records | upstream loop (uniform) | pullguard loop (uniform) | upstream loop (hot) | pullguard loop (hot) |\n|---|---|---|---|---|\n")
	for _, n := range r.sizes {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", count(n),
			r.cell(n, upstreamSide, "harness-uniform", duration), r.cell(n, pullguardSide, "harness-uniform", duration),
			r.cell(n, upstreamSide, "harness-hot", duration), r.cell(n, pullguardSide, "harness-hot", duration))
	}

	fmt.Fprintf(w, "\n### Writes: a pull intent and a pulled record, for a new image (wall clock per pull)\n\n")
	fmt.Fprintf(w, "| records | upstream | pullguard | upstream ÷ pullguard | writes measured (upstream / pullguard) |\n|---|---|---|---|---|\n")
	for _, n := range r.sizes {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d / %d |\n", count(n),
			r.cell(n, upstreamSide, "write", duration), r.cell(n, pullguardSide, "write", duration), r.ratio(n, "write"),
			r.counts[key{n, upstreamSide, "write"}], r.counts[key{n, pullguardSide, "write"}])
	}
	fmt.Fprintf(w, "\npullguard fsyncs each write (one bbolt transaction each); the kubelet writes a temporary file and renames it, without fsync, then lists the directory to update a gauge.\n")

	fmt.Fprintf(w, "\n### Start-up: opening the store and loading N records (wall clock; CPU time of the process)\n\n")
	fmt.Fprintf(w, "| records | upstream | pullguard | upstream ÷ pullguard | upstream CPU | pullguard CPU |\n|---|---|---|---|---|---|\n")
	for _, n := range r.sizes {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", count(n),
			r.cell(n, upstreamSide, "startup", duration), r.cell(n, pullguardSide, "startup", duration), r.ratio(n, "startup"),
			r.cell(n, upstreamSide, "startup-cpu", duration), r.cell(n, pullguardSide, "startup-cpu", duration))
	}

	fmt.Fprintf(w, "\n### Memory and disk\n\n")
	fmt.Fprintf(w, "| records | upstream heap | pullguard heap | pullguard heap per record | upstream disk per record | pullguard disk per record |\n|---|---|---|---|---|---|\n")
	for _, n := range r.sizes {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", count(n),
			r.cell(n, upstreamSide, "heap-total", size), r.cell(n, pullguardSide, "heap-total", size),
			r.cell(n, pullguardSide, "heap", size),
			r.cell(n, upstreamSide, "disk", size), r.cell(n, pullguardSide, "disk", size))
	}
	fmt.Fprintf(w, "\nHeap: live heap after a GC, after start-up minus before. The kubelet keeps at most %d pulled records in memory (5 × maxPods) and reads the others from disk on every decision; pullguard keeps every record in memory (its store is also memory-mapped; mapped pages are not heap). Disk: the space the kubelet's files take (one file per record, a block each); pullguard's store file.\n", 5*kubeletMaxPods)
}

// cell formats a figure's median and range.
func (r *results) cell(n int, side, quantity string, format func(float64) string) string {
	s, ok := r.figures[key{n, side, quantity}]
	if !ok {
		return "–"
	}
	lo, hi := s.span()
	if len(s) == 1 || format(lo) == format(hi) {
		return format(s.median())
	}
	return fmt.Sprintf("%s (%s–%s)", format(s.median()), format(lo), format(hi))
}

// ratio is upstream's median over pullguard's.
func (r *results) ratio(n int, quantity string) string {
	up, ok1 := r.figures[key{n, upstreamSide, quantity}]
	pg, ok2 := r.figures[key{n, pullguardSide, quantity}]
	if !ok1 || !ok2 || pg.median() <= 0 {
		return "–"
	}
	q := up.median() / pg.median()
	if q >= 10 {
		return fmt.Sprintf("%.0f×", q)
	}
	return fmt.Sprintf("%.1f×", q)
}

// duration formats nanoseconds with three significant digits at most.
func duration(ns float64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%.0f ns", ns)
	case ns < 1e4:
		return fmt.Sprintf("%.2f µs", ns/1e3)
	case ns < 1e6:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	case ns < 1e7:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns < 1e9:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	default:
		return fmt.Sprintf("%.2f s", ns/1e9)
	}
}

func size(b float64) string {
	switch {
	case b >= 10e6:
		return fmt.Sprintf("%.0f MB", b/1e6)
	case b >= 1e6:
		return fmt.Sprintf("%.1f MB", b/1e6)
	case b >= 10e3:
		return fmt.Sprintf("%.0f KB", b/1e3)
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

// count formats a number of records with thin groups: 100 000.
func count(n int) string {
	s := fmt.Sprint(n)
	var out []string
	for len(s) > 3 {
		out = append([]string{s[len(s)-3:]}, out...)
		s = s[:len(s)-3]
	}
	return strings.Join(append([]string{s}, out...), " ")
}
