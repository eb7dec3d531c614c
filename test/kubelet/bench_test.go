package kubelet

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"
)

// TestBenchKubelet is `make bench-kubelet` (not part of `make test`): pod
// start-up and a reboot storm on the same node, with the kubelet's own gate
// and behind `pullguard serve`, in alternating rounds of one run. The
// kubelet has the pull settings deploy/kubelet/config-snippet.yaml
// prescribes, in both modes. PULLGUARD_BENCH_PODS (50: the pods of each
// burst), PULLGUARD_BENCH_SEQ (10: the pods started one at a time),
// PULLGUARD_BENCH_ROUNDS (3) and PULLGUARD_BENCH_STORM_ROUNDS (2; 0: no
// storm) size it. PULLGUARD_BENCH_STORM_PARALLEL_PULLS=N adds a third mode
// to each storm round: serve with the kubelet's maxParallelImagePulls N
// instead of the snippet's (0: unset, no bound);
// PULLGUARD_BENCH_PARALLEL_PULLS=N does the same for the start-up rounds.
// PULLGUARD_BENCH_PAIRS=N (0: none) adds N pairs of bursts in both modes
// on one node (pairedBursts), after the rounds; PULLGUARD_BENCH_PAIRED_BURSTS
// (present,verify) says which bursts a slot measures.
func TestBenchKubelet(t *testing.T) {
	if os.Getenv("PULLGUARD_BENCH_KUBELET") == "" {
		t.Skip("a benchmark: run it with make bench-kubelet")
	}
	pods := envInt(t, "PULLGUARD_BENCH_PODS", 50)
	seq := envInt(t, "PULLGUARD_BENCH_SEQ", 10)
	rounds := envInt(t, "PULLGUARD_BENCH_ROUNDS", 3)
	stormRounds := envInt(t, "PULLGUARD_BENCH_STORM_ROUNDS", 2)
	bins, podLogs := prepare(t)
	require.NotEmpty(t, bins.pullguard, bins.noServe)
	settings := installPullSettings(t)
	t.Logf("the kubelet's pull settings in both modes (deploy/kubelet/config-snippet.yaml):\n%s", settings)
	benchModes := func(round int) []mode {
		ms := []mode{
			{name: gateMode, kubeletGate: true, installed: true, pullSettings: settings},
			// serve with its unit's command line, at its verbosity.
			{name: serveMode, proxy: true, installed: true, quietServe: true, pullSettings: settings},
		}
		if round%2 == 1 {
			slices.Reverse(ms)
		}
		return ms
	}

	// withPulls adds to each round a third mode: serve with the kubelet's
	// maxParallelImagePulls n instead of the snippet's (0: no bound); it
	// runs last in even rounds and first in odd ones.
	withPulls := func(n int) func(int) []mode {
		extra := mode{name: fmt.Sprintf("kubelet-gate-off/pullguard-serve/maxParallelImagePulls=%d", n), proxy: true,
			installed: true, quietServe: true, pullSettings: withParallelPulls(t, settings, n)}
		return func(round int) []mode {
			ms := append(benchModes(round), extra)
			if round%2 == 1 {
				ms[0], ms[2] = ms[2], ms[0]
			}
			return ms
		}
	}
	startModes := benchModes
	if os.Getenv("PULLGUARD_BENCH_PARALLEL_PULLS") != "" {
		startModes = withPulls(envInt(t, "PULLGUARD_BENCH_PARALLEL_PULLS", 0))
	}
	startup := map[string]map[string]*samples{}
	for r := range rounds {
		for _, m := range startModes(r) {
			t.Run(fmt.Sprintf("start-up/round-%d/%s", r, m.name), func(t *testing.T) {
				if startup[m.name] == nil {
					startup[m.name] = map[string]*samples{}
				}
				startupRound(t, m, bins, podLogs, seq, pods, startup[m.name])
			})
		}
	}
	if pairs := envInt(t, "PULLGUARD_BENCH_PAIRS", 0); pairs > 0 {
		t.Run("paired-bursts", func(t *testing.T) {
			paired := map[string]map[string]*samples{}
			bursts := strings.Split(cmp.Or(os.Getenv("PULLGUARD_BENCH_PAIRED_BURSTS"), strings.Join(pairedPhases, ",")), ",")
			ps := pairedBursts(t, [2]mode(benchModes(0)), bins, podLogs, pairs, pods, bursts, paired)
			var b strings.Builder
			fmt.Fprintf(&b, "\n%s\nCPU seconds per burst, the mean of %d pairs:\n\n", pairedReport(ps, pods), len(ps))
			cpuTable(&b, pairedPhases, paired, max(len(ps), 1))
			t.Log(b.String())
		})
	}
	stormModes := benchModes
	if os.Getenv("PULLGUARD_BENCH_STORM_PARALLEL_PULLS") != "" {
		stormModes = withPulls(envInt(t, "PULLGUARD_BENCH_STORM_PARALLEL_PULLS", 0))
	}
	storm := map[string]*samples{}
	for r := range stormRounds {
		for _, m := range stormModes(r) {
			t.Run(fmt.Sprintf("reboot-storm/round-%d/%s", r, m.name), func(t *testing.T) {
				if storm[m.name] == nil {
					storm[m.name] = &samples{}
				}
				rebootStorm(t, m, bins, podLogs, storm[m.name])
			})
		}
	}
	t.Log("\n" + benchReport(startup, storm, seq, pods))
}

// The bench's two modes, by name: the kubelet's own gate with containerd
// as its image service, and the kubelet's gate off behind pullguard serve.
const (
	gateMode  = "kubelet-gate-on/containerd"
	serveMode = "kubelet-gate-off/pullguard-serve"
)

// installPullSettings is what the install's snippet sets in the kubelet's
// configuration, but the endpoints, as configuration lines.
func installPullSettings(t *testing.T) string {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubelet", "config-snippet.yaml"))
	require.NoError(t, err)
	var snippet map[string]any
	require.NoError(t, yaml.Unmarshal(data, &snippet))
	for _, k := range []string{"apiVersion", "kind", "containerRuntimeEndpoint", "imageServiceEndpoint"} {
		delete(snippet, k)
	}
	require.NotEmpty(t, snippet, "the snippet sets nothing but the endpoints")
	out, err := yaml.Marshal(snippet)
	require.NoError(t, err)
	return string(out)
}

// withParallelPulls is settings with maxParallelImagePulls n (0: the
// line removed, no bound).
func withParallelPulls(t *testing.T, settings string, n int) string {
	var out []string
	found := false
	for _, l := range strings.Split(strings.TrimRight(settings, "\n"), "\n") {
		if strings.HasPrefix(l, "maxParallelImagePulls:") {
			found = true
			if n == 0 {
				continue
			}
			l = fmt.Sprintf("maxParallelImagePulls: %d", n)
		}
		out = append(out, l)
	}
	require.True(t, found, "the snippet sets maxParallelImagePulls")
	return strings.Join(out, "\n") + "\n"
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, name)
	require.GreaterOrEqual(t, n, 0, name)
	return n
}

// samples are durations measured in one mode, by what they measure.
type samples struct {
	mu sync.Mutex
	d  map[string][]time.Duration
	// sliSum and sliCount add up the kubelet's
	// kubelet_pod_start_sli_duration_seconds over the phases, by phase.
	sliSum, sliCount map[string]float64
	// cpu adds up the CPU seconds each of the node's processes used
	// during the phases, by process.
	cpu map[string]float64
}

func (s *samples) addCPU(d map[string]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cpu == nil {
		s.cpu = map[string]float64{}
	}
	for k, v := range d {
		s.cpu[k] += v
	}
}

// nodeProcesses are the rows of the CPU tables: the machine's busy time,
// then each of the node's processes (cpuSeconds' keys).
var nodeProcesses = []string{"all", "kubelet", "kube-apiserver", "etcd", "containerd", "registry", "pullguard serve"}

// cpuSeconds is the CPU time (user and system) each of the node's
// processes has used so far, and the whole machine's busy time ("all").
// Every other process is a key "pid/PID/START/COMM" (START: its start time,
// so that a reused PID is another key) with its own time and that of the
// children it reaped (a shim's runc): cpuDelta adds them up by command.
func (c *cluster) cpuSeconds(t *testing.T) map[string]float64 {
	procs := map[string]*child{"kubelet": c.kl, "kube-apiserver": c.api, "etcd": c.etcd, "containerd": c.ctrd.proc, "registry": c.reg.proc, "pullguard serve": c.pg}
	out := map[string]float64{}
	named := map[int]bool{}
	for name, ch := range procs {
		if ch == nil || ch.cmd.Process == nil || ch.exited() {
			continue // a stopped kubelet: the one started next counts from 0
		}
		pid := ch.cmd.Process.Pid
		st, err := readProcStat(pid)
		require.NoError(t, err, name)
		out[name] = st.self
		named[pid] = true
	}
	dirs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || named[pid] {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue // it ended since the listing
		}
		out[fmt.Sprintf("pid/%d/%s/%s", pid, st.start, st.comm)] = st.self + st.children
	}
	busy, _ := machineTicks(t)
	out["all"] = busy / 100
	return out
}

// procStat is what cpuSeconds reads of /proc/PID/stat: the command, the
// process's CPU seconds (user and system), those of the children it
// reaped, and its start time (clock ticks after boot, as written).
type procStat struct {
	comm, start    string
	self, children float64
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(pid, data)
}

func parseProcStat(pid int, data []byte) (procStat, error) {
	var err error
	// The command is between the first "(" and the last ")"; it may hold
	// either. After it: utime, stime, cutime and cstime are the 12th to
	// 15th fields, in clock ticks (100 a second), starttime the 20th.
	open, closing := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command in %q", pid, data)
	}
	f := strings.Fields(string(data[closing+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	var ticks [4]float64
	for i := range ticks {
		if ticks[i], err = strconv.ParseFloat(f[11+i], 64); err != nil {
			return procStat{}, fmt.Errorf("/proc/%d/stat: field %d: %w", pid, 14+i, err)
		}
	}
	return procStat{comm: string(data[open+1 : closing]), start: f[19],
		self: (ticks[0] + ticks[1]) / 100, children: (ticks[2] + ticks[3]) / 100}, nil
}

// cpuDelta is the CPU seconds used between two cpuSeconds: by named
// process, "all", and the other processes' by command as "others/COMM"
// (a kernel thread's command up to its "/": "kworker/1:2" is "kworker").
// A process that started in between counts from 0; one that ended in
// between counts only in its parent's children, if the parent reaped it.
func cpuDelta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		rest, ok := strings.CutPrefix(k, "pid/")
		if !ok {
			d[k] = v - before[k]
			continue
		}
		parts := strings.SplitN(rest, "/", 3) // PID, START, COMM
		if len(parts) != 3 {
			continue
		}
		comm, _, _ := strings.Cut(parts[2], "/")
		d["others/"+comm] += v - before[k]
	}
	return d
}

func (s *samples) add(what string, d ...time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d == nil {
		s.d = map[string][]time.Duration{}
	}
	s.d[what] = append(s.d[what], d...)
}

func (s *samples) addSLI(what string, sum, count float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sliSum == nil {
		s.sliSum, s.sliCount = map[string]float64{}, map[string]float64{}
	}
	s.sliSum[what] += sum
	s.sliCount[what] += count
}

// quantile is the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// The images of the start-up rounds: benchImages private repositories of
// tenant A, each pulled once by A before the measured phases.
const benchImages = 10

// verifiers are the tenants that may pull team-a/* with their own
// accounts: each (verifier, image) pair is one verification. The last
// one's pods are the one-at-a-time verifications, the others' the burst's.
const verifiers = 6

// The phases of a start-up round, in the order they run: the pods of one
// at a time first (each created when the one before runs: what one pod's
// start costs, on a machine with cores to spare), then the bursts of pods
// created at once (what a node's two cores do under 50 pods).
var startupPhases = []string{"present, one at a time", "verify, one at a time", "present", "verify"}

// phase is one of startupPhases and its pods.
type phase struct {
	name string
	pods []*corev1.Pod
}

// startupRound brings a node up in mode m, has tenant A pull the images,
// then measures tenant A's pods of the images it pulled ("present") and
// pods of the verifiers, each the first of its (tenant, image) pair
// ("verify"): seq of each started one at a time, then bursts of `pods`
// created at once.
func startupRound(t *testing.T, m mode, bins binaries, podLogs *[]string, seq, pods int, s map[string]*samples) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var imgs []string
	c := startCluster(t, ctx, m, bins, func(c *cluster) {
		c.reg.grant("alice", "team-a/")
		for v := range verifiers {
			c.reg.grant(fmt.Sprintf("verifier-%d", v), "team-a/")
		}
		imgs = publishImages(t, ctx, c, bins, "team-a/app", benchImages)
	})
	*podLogs = append(*podLogs, c.dir+"/pod-logs")
	a, err := c.newTenant(ctx, "bench-a", "alice")
	require.NoError(t, err)
	var vs []*tenant
	for v := range verifiers {
		tn, err := c.newTenant(ctx, fmt.Sprintf("bench-v%d", v), fmt.Sprintf("verifier-%d", v))
		require.NoError(t, err)
		vs = append(vs, tn)
	}
	// Tenant A's first pulls: the images come down (not measured).
	var first []*corev1.Pod
	for i, img := range imgs {
		first = append(first, pod(a.ns, fmt.Sprintf("first-%d", i), img, ifNotPresent, withSecret))
	}
	c.startAll(t, ctx, "first", first)
	c.removeAll(t, ctx, first)

	for _, ph := range startupPhases {
		if s[ph] == nil {
			s[ph] = &samples{}
		}
	}
	require.LessOrEqual(t, seq, len(imgs), "each one-at-a-time verification is of a (tenant, image) pair of its own")
	var present, verify, presentSeq, verifySeq []*corev1.Pod
	for i := range pods {
		present = append(present, pod(a.ns, fmt.Sprintf("present-%d", i), imgs[i%len(imgs)], ifNotPresent, withSecret))
		tn := vs[(i/len(imgs))%(len(vs)-1)]
		verify = append(verify, pod(tn.ns, fmt.Sprintf("verify-%d", i), imgs[i%len(imgs)], ifNotPresent, withSecret))
	}
	for i := range seq {
		presentSeq = append(presentSeq, pod(a.ns, fmt.Sprintf("present-seq-%d", i), imgs[i%len(imgs)], ifNotPresent, withSecret))
		verifySeq = append(verifySeq, pod(vs[len(vs)-1].ns, fmt.Sprintf("verify-seq-%d", i), imgs[i%len(imgs)], ifNotPresent, withSecret))
	}
	phasePods := map[string][]*corev1.Pod{
		startupPhases[0]: presentSeq, startupPhases[1]: verifySeq,
		startupPhases[2]: present, startupPhases[3]: verify,
	}
	for _, name := range startupPhases {
		if len(phasePods[name]) > 0 {
			c.measurePhase(t, ctx, m.name, phase{name, phasePods[name]}, imgs, s[name])
		}
	}
}

// measurePhase starts ph's pods (one at a time, or all at once), adds what
// it measured to s, checks the registry's traffic for imgs (none for
// present images, verifications for the verifiers' pods, never a blob),
// removes the pods and returns their times from creation to running.
func (c *cluster) measurePhase(t *testing.T, ctx context.Context, mode string, ph phase, imgs []string, s *samples) []time.Duration {
	c.settle(t, ctx)
	from := c.reg.markOrFail(t, ctx)
	sum0, count0 := c.podStartSLI(t, ctx)
	cpu0 := c.cpuSeconds(t)
	phaseStart := time.Now()
	var lat []time.Duration
	if strings.HasSuffix(ph.name, "one at a time") {
		for _, p := range ph.pods {
			lat = append(lat, c.startAll(t, ctx, ph.name, []*corev1.Pod{p})...)
		}
	} else {
		lat = c.startAll(t, ctx, ph.name, ph.pods)
	}
	cpu := cpuDelta(cpu0, c.cpuSeconds(t))
	sum1, count1 := c.podStartSLI(t, ctx)
	s.addCPU(cpu)
	tr := summarizeImages(c.reg.hits(from, c.reg.markOrFail(t, ctx)), imgs)
	s.add("watch", lat...)
	s.add("status", c.statusLatencies(t, ctx, ph.pods)...)
	s.addSLI("sli", sum1-sum0, count1-count0)
	t.Logf("%s, %s: %d pods, p50 %s, p99 %s; registry: %d manifest requests granted, %d refused, %d blobs; CPU seconds: %.1f",
		mode, ph.name, len(lat), quantile(lat, 0.5), quantile(lat, 0.99), tr.manifestOK, tr.manifestDenied, tr.blobs, cpu["all"])
	// Behind serve every container start of a hidden image is a pull
	// for the kubelet; with the gate, only the verifications are.
	c.recordPulls(t, ctx, s, mode+", "+ph.name, ph.pods, phaseStart)
	assert.Zero(t, tr.blobs, "%s: no layer is downloaded again", ph.name)
	if strings.HasPrefix(ph.name, "present") {
		assert.Zero(t, tr.total, "tenant A's pods of its own present images make no registry request")
	} else {
		assert.Positive(t, tr.manifestOK, "the verifiers' pods are verified at the registry")
	}
	c.removeAll(t, ctx, ph.pods)
	return lat
}

// settle brings the node to the same state before each measured phase.
// The sandboxes the pods before it left behind are removed now: the
// kubelet removes them in a garbage collection pass once a minute, 100 at
// a time, which landed inside some bursts and not in others (2026-11-26,
// containerd's log). Then it waits, at most a minute, until the machine is
// idle: under a quarter of its cores busy over a second.
func (c *cluster) settle(t *testing.T, ctx context.Context) {
	rt, _, done, err := c.ctrd.cri(ctx)
	require.NoError(t, err)
	defer done()
	dead := &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: dead})
	require.NoError(t, err)
	for _, sb := range resp.GetItems() {
		// The kubelet's own pass may remove it first.
		_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()})
		require.True(t, err == nil || status.Code(err) == codes.NotFound, "stop sandbox %s: %v", sb.GetId(), err)
		_, err = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()})
		require.True(t, err == nil || status.Code(err) == codes.NotFound, "remove sandbox %s: %v", sb.GetId(), err)
	}
	busy0, total0 := machineTicks(t)
	err = poll(time.Minute, time.Second, func() (bool, error) {
		busy, total := machineTicks(t)
		idle := total > total0 && (busy-busy0)/(total-total0) < 0.25
		busy0, total0 = busy, total
		return idle, nil
	})
	if err != nil {
		t.Logf("the machine was not idle within a minute of removing %d sandboxes; measuring anyway", len(resp.GetItems()))
	}
}

// machineTicks are the machine's busy and total CPU time so far, in
// clock ticks, from /proc/stat (busy: all but idle and iowait).
func machineTicks(t *testing.T) (busy, total float64) {
	stat, err := os.ReadFile("/proc/stat")
	require.NoError(t, err)
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	require.Greater(t, len(f), 8)
	for i, v := range f[1:] {
		n, err := strconv.ParseFloat(v, 64)
		require.NoError(t, err)
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total
}

// publishImages pushes n distinct images, repo-0:v1 to repo-(n-1):v1, and
// returns their references.
func publishImages(t *testing.T, ctx context.Context, c *cluster, bins binaries, repo string, n int) []string {
	var refs []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", repo, i)
		img, err := image(bins.pauseBytes, name)
		require.NoError(t, err)
		ref, err := push(ctx, c.reg, img, name, "v1")
		require.NoError(t, err)
		refs = append(refs, ref)
	}
	return refs
}

// startAll creates the pods at once and waits until every container of
// each runs; it returns, per pod, the time from just before its creation
// to the moment a watch saw all its containers running.
func (c *cluster) startAll(t *testing.T, ctx context.Context, phase string, pods []*corev1.Pod) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	key := func(ns, name string) string { return ns + "/" + name }
	logFrom := c.klOut.position() // the kubelet's lines about these pods come after
	created := make(map[string]time.Time, len(pods))
	running := make(map[string]time.Time, len(pods))
	var mu sync.Mutex
	// Pods the kubelet started without their pull secret: under a
	// saturated API server its secret cache can miss its one-second sync
	// ("Unable to retrieve pull secret"), in either mode; the pull is then
	// refused and the kubelet tries again with the secret after its
	// back-off. Such a pod is waited for (its time counts as it is) and
	// reported, not taken as a refusal. Only the watch's goroutine writes
	// it, before it reports on done.
	secretMisses := map[string]bool{}
	// seen notes a pod's state; it reports whether every pod runs, or
	// the error a pod ended in.
	seen := func(p *corev1.Pod) (bool, error) {
		if !allRunning(p) {
			if o, ok := containerOutcome(p); ok && o.state != "Running" {
				if k := key(p.Namespace, p.Name); pullRefused(o) &&
					(secretMisses[k] || c.startedWithoutSecret(p, logFrom)) {
					secretMisses[k] = true
					return false, nil
				}
				return false, fmt.Errorf("pod %s/%s: %s: %s", p.Namespace, p.Name, o.state, o.message)
			}
			return false, nil
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		k := key(p.Namespace, p.Name)
		if _, ok := created[k]; !ok {
			return false, nil // not one of ours
		}
		if _, ok := running[k]; !ok {
			running[k] = now
		}
		return len(running) == len(pods), nil
	}
	// A watch from a list's resource version; when the server ends it,
	// list again (catching up on what ran meanwhile) and watch on.
	list, err := c.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	done := make(chan error, 1)
	relists := 0
	go func() {
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			w, err := c.client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				done <- fmt.Errorf("watch: %w", err)
				return
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					break // too old a resource version, most likely: list again
				}
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				if ev.Type == watch.Deleted {
					continue
				}
				all, err := seen(p)
				if all || err != nil {
					w.Stop()
					done <- err
					return
				}
			}
			w.Stop()
			relists++
			again, err := c.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				done <- fmt.Errorf("list: %w", err)
				return
			}
			rv = again.ResourceVersion
			for i := range again.Items {
				all, err := seen(&again.Items[i])
				if all || err != nil {
					done <- err
					return
				}
			}
		}
		done <- ctx.Err()
	}()
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			created[key(p.Namespace, p.Name)] = time.Now()
			mu.Unlock()
			if _, err := c.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "create")
	}
	require.NoError(t, <-done, "%s: waiting for %d pods", phase, len(pods))
	if relists > 0 {
		t.Logf("%s: the watch was ended by the server %d times (listed again each time)", phase, relists)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(secretMisses) > 0 {
		t.Logf("%s: %d pods started without their pull secret (the kubelet's secret cache missed its sync), were refused by the registry and ran after the kubelet's back-off; their times count", phase, len(secretMisses))
	}
	lat := make([]time.Duration, 0, len(pods))
	for k, at := range running {
		lat = append(lat, at.Sub(created[k]))
	}
	return lat
}

// allRunning reports whether every container of p runs.
func allRunning(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// statusLatencies are the pods' own timestamps: creation to the last of
// its containers' start (whole seconds: the API's resolution).
func (c *cluster) statusLatencies(t *testing.T, ctx context.Context, pods []*corev1.Pod) []time.Duration {
	var out []time.Duration
	for _, p := range pods {
		got, err := c.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		require.NoError(t, err)
		var last time.Time
		for _, cs := range got.Status.ContainerStatuses {
			if cs.State.Running != nil && cs.State.Running.StartedAt.After(last) {
				last = cs.State.Running.StartedAt.Time
			}
		}
		out = append(out, last.Sub(got.CreationTimestamp.Time))
	}
	return out
}

// removeAll deletes the pods and waits until they are gone.
func (c *cluster) removeAll(t *testing.T, ctx context.Context, pods []*corev1.Pod) {
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.remove(ctx, p.Namespace, p.Name)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// podStartSLI is the kubelet's kubelet_pod_start_sli_duration_seconds:
// its sum and count so far.
func (c *cluster) podStartSLI(t *testing.T, ctx context.Context) (sum, count float64) {
	sum, err := c.kubeletMetric(ctx, "kubelet_pod_start_sli_duration_seconds_sum", nil)
	require.NoError(t, err)
	count, err = c.kubeletMetric(ctx, "kubelet_pod_start_sli_duration_seconds_count", nil)
	require.NoError(t, err)
	return sum, count
}

func (r *registry) markOrFail(t *testing.T, ctx context.Context) int {
	pos, err := r.mark(ctx)
	require.NoError(t, err)
	return pos
}

// The reboot storm: stormPods pods of stormContainers containers each,
// over stormImages private images of tenant A (each image in 5
// containers): 200 containers of 40 images.
const (
	stormImages     = 40
	stormPods       = 40
	stormContainers = 5
)

// rebootStorm starts the storm's pods (their images come down), then
// "reboots" the node: the kubelet stops, every pod sandbox is removed from
// containerd (the images and the records stay, as on a reboot), and the
// kubelet starts again and restarts all 200 containers at once. It
// measures the time from the kubelet's start to every container running
// again, and requires that none met the kubelet's pull throttle.
func rebootStorm(t *testing.T, m mode, bins binaries, podLogs *[]string, s *samples) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var imgs []string
	c := startCluster(t, ctx, m, bins, func(c *cluster) {
		c.reg.grant("alice", "team-a/")
		imgs = publishImages(t, ctx, c, bins, "team-a/storm", stormImages)
	})
	*podLogs = append(*podLogs, c.dir+"/pod-logs")
	a, err := c.newTenant(ctx, "storm-a", "alice")
	require.NoError(t, err)
	var pods []*corev1.Pod
	for i := range stormPods {
		p := pod(a.ns, fmt.Sprintf("storm-%d", i), imgs[(i*stormContainers)%stormImages], ifNotPresent, withSecret)
		for j := 1; j < stormContainers; j++ {
			ctr := p.Spec.Containers[0]
			ctr.Name = fmt.Sprintf("app-%d", j)
			ctr.Image = imgs[(i*stormContainers+j)%stormImages]
			p.Spec.Containers = append(p.Spec.Containers, ctr)
		}
		pods = append(pods, p)
	}
	c.startAll(t, ctx, "before the reboot", pods)
	before := c.containerIDs(t, ctx, pods)

	c.kl.stop(20 * time.Second)
	c.removeSandboxes(t, ctx)
	from := c.reg.markOrFail(t, ctx)
	start := time.Now()
	cpu0 := c.cpuSeconds(t)
	c.startKubelet(ctx)
	require.NoError(t, poll(10*time.Minute, 200*time.Millisecond, func() (bool, error) {
		now := c.containerIDs(t, ctx, pods)
		if len(now) < stormPods*stormContainers {
			return false, nil
		}
		for id := range now {
			if before[id] {
				return false, nil
			}
		}
		return true, nil
	}), "every container running again after the reboot")
	took := time.Since(start)
	s.add("storm", took)
	s.addCPU(cpuDelta(cpu0, c.cpuSeconds(t)))
	tr := summarizeImages(c.reg.hits(from, c.reg.markOrFail(t, ctx)), imgs)
	throttled := 0
	for _, p := range pods {
		n, err := c.eventCount(ctx, p.Namespace, p.Name, "Failed", "pull QPS exceeded")
		require.NoError(t, err)
		throttled += n
	}
	t.Logf("%s: %d containers of %d images running again %s after the kubelet's start; registry: %d requests; %d pull QPS exceeded events",
		m.name, stormPods*stormContainers, stormImages, took.Round(10*time.Millisecond), tr.total, throttled)
	if m.proxy {
		c.recordPulls(t, ctx, s, m.name, pods, start)
	}
	assert.Zero(t, throttled, "no container met the kubelet's pull throttle")
	assert.False(t, c.kubeletLogHas("pull QPS exceeded"), "the kubelet logged no pull QPS exceeded")
	assert.Zero(t, tr.total, "tenant A's own present images need no registry request")
}

// pulledEvent is the kubelet's message for a successful pull
// (pkg/kubelet/images/image_manager.go): the pull's own time, and the time
// including the wait for one of maxParallelImagePulls slots.
var pulledEvent = regexp.MustCompile(`^Successfully pulled image ".*" in ([0-9.a-zµ]+) \(([0-9.a-zµ]+) including waiting\)`)

// parsePulled reads a Pulled message: the pull's own time and the time
// including the wait for a slot; ok is false for another message.
func parsePulled(msg string) (pulled, total time.Duration, ok bool, err error) {
	m := pulledEvent.FindStringSubmatch(msg)
	if m == nil {
		return 0, 0, false, nil
	}
	pulled, err1 := time.ParseDuration(m[1])
	total, err2 := time.ParseDuration(m[2])
	return pulled, total, true, errors.Join(err1, err2)
}

// recordPulls adds the kubelet's figures for the pulls of pods it reported
// after since to s, and logs them under label.
func (c *cluster) recordPulls(t *testing.T, ctx context.Context, s *samples, label string, pods []*corev1.Pod, since time.Time) {
	pulled, waited := c.pullTimes(t, ctx, pods, since)
	if len(pulled) == 0 {
		return
	}
	s.add("pull", pulled...)
	s.add("wait", waited...)
	t.Logf("%s: %s", label, pullSummary(pulled, waited))
}

// pullSummary is how many pulls, their own time and their wait for a
// pull slot, at p50 and p99.
func pullSummary(pulled, waited []time.Duration) string {
	ms := func(ds []time.Duration, q float64) string {
		return fmt.Sprintf("%.0f ms", float64(quantile(ds, q))/float64(time.Millisecond))
	}
	return fmt.Sprintf("%d pulls in the kubelet's Pulled events: pull p50 %s, p99 %s; wait for a pull slot p50 %s, p99 %s",
		len(pulled), ms(pulled, 0.5), ms(pulled, 0.99), ms(waited, 0.5), ms(waited, 0.99))
}

// pullTimes are the kubelet's own figures for each pull of the pods it
// reported after since: the pull (PullImage and the size look-up) and the
// wait for a pull slot before it.
func (c *cluster) pullTimes(t *testing.T, ctx context.Context, pods []*corev1.Pod, since time.Time) (pulled, waited []time.Duration) {
	for _, p := range pods {
		evs, err := c.kubeletEvents(ctx, p.Namespace, p.Name)
		require.NoError(t, err)
		for _, e := range evs {
			if e.Reason != "Pulled" || e.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
				continue
			}
			d, all, ok, err := parsePulled(e.Message)
			require.NoError(t, err, "the kubelet's event %q", e.Message)
			if !ok {
				continue
			}
			for range max(e.Count, 1) {
				pulled = append(pulled, d)
				waited = append(waited, all-d)
			}
		}
	}
	return pulled, waited
}

// summarizeImages sums up the registry's requests for the images'
// repositories (total: every request).
func summarizeImages(hits []hit, images []string) traffic {
	var sum traffic
	seen := map[string]bool{}
	for _, img := range images {
		_, rest, _ := strings.Cut(img, "/")
		repo, _, _ := strings.Cut(rest, ":")
		if seen[repo] {
			continue
		}
		seen[repo] = true
		tr := summarize(hits, repo)
		sum.manifestOK += tr.manifestOK
		sum.manifestDenied += tr.manifestDenied
		sum.blobs += tr.blobs
	}
	sum.total = len(hits)
	return sum
}

// containerIDs are the IDs of the pods' running containers.
func (c *cluster) containerIDs(t *testing.T, ctx context.Context, pods []*corev1.Pod) map[string]bool {
	ids := map[string]bool{}
	for _, p := range pods {
		got, err := c.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		require.NoError(t, err)
		for _, cs := range got.Status.ContainerStatuses {
			if cs.State.Running != nil && cs.ContainerID != "" {
				ids[cs.ContainerID] = true
			}
		}
	}
	return ids
}

// removeSandboxes stops and removes every pod sandbox on containerd's own
// socket: what a reboot leaves of the pods (their images stay).
func (c *cluster) removeSandboxes(t *testing.T, ctx context.Context) {
	rt, _, done, err := c.ctrd.cri(ctx)
	require.NoError(t, err)
	defer done()
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	require.NoError(t, err)
	for _, sb := range resp.GetItems() {
		_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()})
		require.NoError(t, err)
		_, err = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()})
		require.NoError(t, err)
	}
	t.Logf("removed %d pod sandboxes", len(resp.GetItems()))
}

// benchReport is the Markdown of docs/benchmarks.md's "serve on a node".
func benchReport(startup map[string]map[string]*samples, storm map[string]*samples, seq, pods int) string {
	const gate, serve = gateMode, serveMode
	var b strings.Builder
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	if startup[gate] == nil || startup[serve] == nil {
		return stormReport(&b, storm)
	}
	fmt.Fprintf(&b, "Pod start-up, %d pods one at a time and %d pods created at once per phase (creation to all containers running):\n\n", seq, pods)
	fmt.Fprintf(&b, "| phase | measure | kubelet gate | serve | serve − gate | serve / gate |\n|---|---|---|---|---|---|\n")
	for _, ph := range startupPhases {
		g, sv := startup[gate][ph], startup[serve][ph]
		if g == nil || sv == nil {
			continue
		}
		for _, q := range []struct {
			name string
			q    float64
		}{{"p50", 0.5}, {"p99", 0.99}} {
			gq, sq := quantile(g.d["watch"], q.q), quantile(sv.d["watch"], q.q)
			fmt.Fprintf(&b, "| %s | %s (watch, %d pods) | %s | %s | %s | %.2f |\n", ph, q.name, len(g.d["watch"]), ms(gq), ms(sq), ms(sq-gq), float64(sq)/float64(max(gq, 1)))
			gs, ss := quantile(g.d["status"], q.q), quantile(sv.d["status"], q.q)
			fmt.Fprintf(&b, "| %s | %s (pod status, 1 s resolution) | %s | %s | %s | |\n", ph, q.name, ms(gs), ms(ss), ms(ss-gs))
		}
		gm, sm := g.sliSum["sli"]/max(g.sliCount["sli"], 1), sv.sliSum["sli"]/max(sv.sliCount["sli"], 1)
		fmt.Fprintf(&b, "| %s | mean of kubelet_pod_start_sli_duration_seconds (%.0f / %.0f pods) | %.0f ms | %.0f ms | %.0f ms | %.2f |\n",
			ph, g.sliCount["sli"], sv.sliCount["sli"], gm*1000, sm*1000, (sm-gm)*1000, sm/max(gm, 1e-9))
		for _, k := range []struct{ key, what string }{{"pull", "pull (the kubelet's Pulled events)"}, {"wait", "wait for a pull slot"}} {
			if len(g.d[k.key])+len(sv.d[k.key]) == 0 {
				continue
			}
			pct := func(x *samples, q float64) string {
				if len(x.d[k.key]) == 0 {
					return "no pulls"
				}
				return ms(quantile(x.d[k.key], q))
			}
			fmt.Fprintf(&b, "| %s | %s p50 / p99 (%d / %d pulls) | %s / %s | %s / %s | | |\n",
				ph, k.what, len(g.d[k.key]), len(sv.d[k.key]), pct(g, 0.5), pct(g, 0.99), pct(sv, 0.5), pct(sv, 0.99))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(startup)) {
		if name == gate || name == serve || startup[gate] == nil {
			continue
		}
		for _, ph := range startupPhases {
			x, g := startup[name][ph], startup[gate][ph]
			if x == nil || g == nil {
				continue
			}
			xm, gm := quantile(x.d["watch"], 0.5), quantile(g.d["watch"], 0.5)
			fmt.Fprintf(&b, "\n%s, %s: p50 %s, p99 %s (%d pods), / gate p50 %.2f", name, ph, ms(xm), ms(quantile(x.d["watch"], 0.99)), len(x.d["watch"]), float64(xm)/float64(max(gm, 1)))
			if len(x.d["pull"]) > 0 {
				fmt.Fprintf(&b, "; %s", pullSummary(x.d["pull"], x.d["wait"]))
			}
		}
		fmt.Fprintln(&b)
	}
	b.WriteString("\nCPU seconds used while the pods started, summed over the rounds:\n\n")
	cpuTable(&b, startupPhases, startup, 1)
	return stormReport(&b, storm)
}

// cpuTable adds to b the CPU seconds of each of the node's processes in
// each phase, by mode (m[mode][phase]), divided by n: the busy time of the
// whole machine, each process, and "others", the rest of the busy time
// (the containers' shims and runc, the bench itself, the kernel's
// threads).
func cpuTable(b *strings.Builder, phases []string, m map[string]map[string]*samples, n int) {
	const gate, serve = gateMode, serveMode
	b.WriteString("| phase | process | kubelet gate | serve | serve − gate |\n|---|---|---|---|---|\n")
	for _, ph := range phases {
		g, sv := m[gate][ph], m[serve][ph]
		if g == nil || sv == nil || g.cpu == nil || sv.cpu == nil {
			continue
		}
		row := func(proc string, gc, sc float64) {
			gc, sc = gc/float64(n), sc/float64(n)
			fmt.Fprintf(b, "| %s | %s | %.2f | %.2f | %+.2f |\n", ph, proc, gc, sc, sc-gc)
		}
		gOthers, sOthers := g.cpu["all"], sv.cpu["all"]
		for _, proc := range nodeProcesses {
			row(proc, g.cpu[proc], sv.cpu[proc])
			if proc != "all" {
				gOthers, sOthers = gOthers-g.cpu[proc], sOthers-sv.cpu[proc]
			}
		}
		row("others", gOthers, sOthers)
		// The others by command, the larger first; under 0.05 s a
		// burst in both modes, left out.
		comms := slices.Collect(maps.Keys(g.cpu))
		for k := range sv.cpu {
			if _, ok := g.cpu[k]; !ok {
				comms = append(comms, k)
			}
		}
		comms = slices.DeleteFunc(comms, func(k string) bool {
			return !strings.HasPrefix(k, "others/") || max(g.cpu[k], sv.cpu[k])/float64(n) < 0.05
		})
		slices.SortFunc(comms, func(a, b string) int {
			return cmp.Or(cmp.Compare(max(g.cpu[b], sv.cpu[b]), max(g.cpu[a], sv.cpu[a])), strings.Compare(a, b))
		})
		for _, k := range comms {
			row(k, g.cpu[k], sv.cpu[k])
		}
	}
}

// stormReport adds the reboot storms' figures to b and returns it.
func stormReport(b *strings.Builder, storm map[string]*samples) string {
	const gate, serve = gateMode, serveMode
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	if g, sv := storm[gate], storm[serve]; g != nil && sv != nil {
		fmt.Fprintf(b, "\nCPU seconds of the reboot storms, summed over the rounds:\n\n| process | kubelet gate | serve | serve − gate |\n|---|---|---|---|\n")
		for _, proc := range nodeProcesses {
			fmt.Fprintf(b, "| %s | %.1f | %.1f | %+.1f |\n", proc, g.cpu[proc], sv.cpu[proc], sv.cpu[proc]-g.cpu[proc])
		}
		gm, sm := quantile(g.d["storm"], 0.5), quantile(sv.d["storm"], 0.5)
		fmt.Fprintf(b, "\nReboot storm, %d containers of %d images: kubelet start to all running, median of %d rounds (all: gate %v, serve %v): gate %s, serve %s, serve / gate %.2f\n",
			stormPods*stormContainers, stormImages, len(g.d["storm"]), roundAll(g.d["storm"]), roundAll(sv.d["storm"]), ms(gm), ms(sm), float64(sm)/float64(max(gm, 1)))
		for _, name := range slices.Sorted(maps.Keys(storm)) {
			x := storm[name]
			if name != gate && name != serve {
				xm := quantile(x.d["storm"], 0.5)
				fmt.Fprintf(b, "%s: median %s (all: %v), / gate %.2f; CPU seconds: kubelet %.1f, kube-apiserver %.1f, etcd %.1f, containerd %.1f, serve %.1f\n",
					name, ms(xm), roundAll(x.d["storm"]), float64(xm)/float64(max(gm, 1)),
					x.cpu["kubelet"], x.cpu["kube-apiserver"], x.cpu["etcd"], x.cpu["containerd"], x.cpu["pullguard serve"])
			}
			if len(x.d["pull"]) > 0 {
				fmt.Fprintf(b, "%s: %s\n", name, pullSummary(x.d["pull"], x.d["wait"]))
			}
		}
	}
	return b.String()
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}

// TestPulledEvent reads the kubelet's Pulled messages as
// pkg/kubelet/images/image_manager.go v1.36.3 writes them (%v of two
// time.Durations).
func TestPulledEvent(t *testing.T) {
	for _, tc := range []struct {
		pulled, total time.Duration
	}{
		{52123456 * time.Nanosecond, 2500 * time.Millisecond},
		{830 * time.Microsecond, 830 * time.Microsecond},
		{62*time.Second + 500*time.Millisecond, 75 * time.Second},
	} {
		msg := fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.", "127.0.0.1:5000/team-a/app:v1", tc.pulled, tc.total, 1234)
		d, all, ok, err := parsePulled(msg)
		require.True(t, ok, msg)
		require.NoError(t, err, msg)
		assert.Equal(t, tc.pulled, d, msg)
		assert.Equal(t, tc.total, all, msg)
	}
	_, _, ok, err := parsePulled(`Container image "127.0.0.1:5000/team-a/app:v1" already present on machine`)
	assert.False(t, ok)
	assert.NoError(t, err)
}
