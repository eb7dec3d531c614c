package credtracker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
)

func benchImage(i int) string { return fmt.Sprintf("registry.example/tenant-%d/app-%d:v1", i%500, i) }
func benchRef(i int) string   { return fmt.Sprintf("sha256:%064x", i+1) }

func benchCred(h *credential.Hasher, i int) credential.Credential {
	auth := credential.AuthConfig{Username: fmt.Sprintf("tenant-%d", i%500), Password: "pw"}
	return credential.Credential{Registry: "registry.example", Auth: auth,
		Source: credential.Source{Kind: credential.SourceSecret, Namespace: fmt.Sprintf("tenant-%d", i%500), Name: "regcred", UID: fmt.Sprintf("%08d-3d4a-4c5b-9e7f-0a1b2c3d4e5f", i%500)},
		Hash:   h.Hash("registry.example", auth)}
}

// populate writes n records (one repository, one secret each, as a
// typical private image) into a new store under dir, in one transaction.
func populate(b *testing.B, dir string, n int) {
	b.Helper()
	h, _, err := credential.LoadOrCreateHasher(filepath.Join(dir, HashKeyFile))
	if err != nil {
		b.Fatal(err)
	}
	s, err := newBenchStore(dir, h)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	recs := make([]*ImageRecord, n)
	for i := range recs {
		c := benchCred(h, i)
		repo, _ := RepositoryName(benchImage(i))
		recs[i] = (*ImageRecord)(nil).withPull(benchRef(i), repo, c.Source, c.Hash, now, DefaultMaxEntries, 0)
	}
	// Write as the tracker does, one transaction per record, in random key
	// order (image refs are digests), so the file has the pages and free
	// pages a real node's has. Only fsync is skipped, to build it quickly.
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	s.db.NoSync = true
	for _, r := range recs {
		if err := s.putRecord(r, ""); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.close(); err != nil {
		b.Fatal(err)
	}
}

var registerOnce sync.Once

func openBench(b *testing.B, n int) (*tracker, string) {
	b.Helper()
	// Count decisions as a node does: with the metrics registered.
	registerOnce.Do(func() { metrics.NewKubeRegistry().MustRegister(Metrics()...) })
	dir := b.TempDir()
	populate(b, dir, n)
	tr, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	return tr.(*tracker), dir
}

// benchRequest is the request for record i: present image, the pod holds
// the credential that pulled it.
func benchRequest(tr *tracker, i int) Request {
	creds := []credential.Credential{benchCred(tr.hasher, i)}
	img := benchImage(i)
	return Request{Image: img, ImageRef: benchRef(i), Names: []string{img}, PullPolicy: corev1.PullIfNotPresent, Credentials: func() []credential.Credential { return creds }}
}

// benchOrderLen is the length of the precomputed sequence of request
// indices; it is read sequentially, so the hardware prefetcher hides it.
const benchOrderLen = 1 << 20

// benchTenants is the number of distinct tenants (and credentials) of the
// benchmark's records: record i belongs to tenant i%benchTenants.
const benchTenants = 500

// reqGen builds the request for record i into one reused buffer, as a node
// builds a request from the pod spec it is starting: the request's bytes
// are in the cache. Prebuilding 100 000 requests instead would put tens of
// megabytes of the harness's own memory between the tracker and the CPU
// caches, and charge the tracker for the harness's cache misses.
//
// The request's strings alias the buffer, which the next request
// overwrites: Decide must not retain them. It does not on this workload
// (every record already names its secret, so no coordinates are
// written); runDecide checks it.
type reqGen struct {
	creds [benchTenants]func() []credential.Credential
	buf   []byte
	names [1]string
}

func newReqGen(h *credential.Hasher) *reqGen {
	g := &reqGen{buf: make([]byte, 0, 256)}
	for t := range g.creds {
		c := []credential.Credential{benchCred(h, t)}
		g.creds[t] = func() []credential.Credential { return c }
	}
	return g
}

// request returns benchRequest(tr, i), built without allocating.
func (g *reqGen) request(i int) Request {
	const hexDigits = "0123456789abcdef"
	b := append(g.buf[:0], "registry.example/tenant-"...)
	b = strconv.AppendUint(b, uint64(i%benchTenants), 10)
	b = append(b, "/app-"...)
	b = strconv.AppendUint(b, uint64(i), 10)
	b = append(b, ":v1"...)
	n := len(b)
	b = append(b, "sha256:000000000000000000000000000000000000000000000000"...) // %064x: 48 zeros, then 16 digits
	v := uint64(i + 1)
	for k := 60; k >= 0; k -= 4 {
		b = append(b, hexDigits[(v>>uint(k))&15])
	}
	s := unsafe.String(unsafe.SliceData(b), len(b))
	g.buf = b
	g.names[0] = s[:n]
	return Request{Image: s[:n], ImageRef: s[n:], Names: g.names[:], PullPolicy: corev1.PullIfNotPresent, Credentials: g.creds[i%benchTenants]}
}

// uniformOrder draws record indices uniformly over all n records: the
// node's worst case, every decision a cold lookup.
func uniformOrder(n int) []uint32 {
	order := make([]uint32, benchOrderLen)
	rng := rand.New(rand.NewPCG(3, uint64(n)))
	for k := range order {
		order[k] = uint32(rng.IntN(n))
	}
	return order
}

// hotOrder draws record indices uniformly over a hot set of min(n, 1024)
// records spread over the store.
func hotOrder(n int) []uint32 {
	hot := min(n, 1024)
	order := make([]uint32, benchOrderLen)
	rng := rand.New(rand.NewPCG(5, uint64(n)))
	for k := range order {
		order[k] = uint32((rng.IntN(hot) * 7919) % n)
	}
	return order
}

// touchRequest reads what Decide reads of a request that is not the
// tracker's own memory: the Request itself, its strings and its
// credentials. Its cost, with building the request, is the harness's,
// subtracted from the figures.
//
//go:noinline
func touchRequest(req Request) uint {
	s := uint(req.Image[0]) + uint(req.Image[len(req.Image)-1]) + uint(req.ImageRef[0]) + uint(req.ImageRef[len(req.ImageRef)-1])
	s += uint(req.Names[0][len(req.Names[0])-1]) + uint(req.PullPolicy[0])
	creds := req.Credentials()
	return s + uint(creds[0].Hash[0]) + uint(creds[0].Hash[31])
}

var benchSink uint

// runDecide times Decide over the requests for order, after timing the
// harness alone over the same number of requests; it reports both and
// their difference (net-ns/op, the decision's own cost), in wall time and
// in the thread's CPU time (cpu-net-ns/op).
func runDecide(b *testing.B, tr *tracker, order []uint32) {
	g := newReqGen(tr.hasher)
	for _, i := range order[:4] { // Records copies every record: a few checks are enough
		want := benchRequest(tr, int(i))
		got := g.request(int(i))
		if got.Image != want.Image || got.ImageRef != want.ImageRef || got.Credentials()[0].Hash != want.Credentials()[0].Hash {
			b.Fatalf("generated request %d differs from benchRequest", i)
		}
		before := tr.Records()
		if d := tr.Decide(got); d.Reason != ReasonCredentialMatch {
			b.Fatalf("decision %v, want a credential match", d)
		}
		if !reflect.DeepEqual(before, tr.Records()) {
			b.Fatal("the decision wrote a record: it would retain the generator's reused buffer")
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mask := uint32(len(order) - 1)
	var sink uint
	start, cpu0 := time.Now(), threadCPU()
	for i := 0; i < b.N; i++ {
		sink += touchRequest(g.request(int(order[uint32(i)&mask])))
	}
	harness, harnessCPU := time.Since(start), threadCPU()-cpu0
	benchSink += sink
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 = threadCPU()
	for i := 0; i < b.N; i++ {
		tr.Decide(g.request(int(order[uint32(i)&mask])))
	}
	cpu := threadCPU() - cpu0
	b.StopTimer()
	n := float64(b.N)
	h := float64(harness.Nanoseconds()) / n
	b.ReportMetric(h, "harness-ns/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n-h, "net-ns/op")
	// The same difference in the thread's CPU time: on a shared machine,
	// time spent waiting for a core does not inflate it.
	b.ReportMetric(float64((cpu-harnessCPU).Nanoseconds())/n, "cpu-net-ns/op")
}

var decideSizes = []int{1_000, 10_000, 100_000}

// BenchmarkDecide is the decision on a present image whose record matches
// the pod's credential, with the metrics registered as on a node, over two
// workloads: uniform (each request drawn uniformly over all records) and
// hot1024 (drawn uniformly over 1 024 records). ns/op includes the
// harness; net-ns/op subtracts it.
func BenchmarkDecide(b *testing.B) {
	for _, n := range decideSizes {
		tr, _ := openBench(b, n)
		for _, wl := range []struct {
			name  string
			order func(int) []uint32
		}{{"uniform", uniformOrder}, {"hot1024", hotOrder}} {
			order := wl.order(n)
			b.Run(fmt.Sprintf("workload=%s/records=%d", wl.name, n), func(b *testing.B) { runDecide(b, tr, order) })
		}
		tr.Close()
	}
}

// BenchmarkDecideParallel shows readers do not wait for each other: with
// -cpu 1,2, ns/op halves when a second core is added. Uniform workload.
func BenchmarkDecideParallel(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("workload=uniform/records=%d", n), func(b *testing.B) {
			tr, _ := openBench(b, n)
			order := uniformOrder(n)
			var seq atomic.Uint32
			mask := uint32(len(order) - 1)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := newReqGen(tr.hasher)
				k := seq.Add(1 << 16)
				for pb.Next() {
					tr.Decide(g.request(int(order[k&mask])))
					k++
				}
			})
		})
	}
}

// BenchmarkRecordImagePulled is the durable write path: intent, pull
// recorded (one fsynced transaction each).
func BenchmarkRecordImagePulled(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			tr, _ := openBench(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				img, ref := benchImage(n+i), benchRef(n+i)
				if err := tr.RecordPullIntent(img); err != nil {
					b.Fatal(err)
				}
				if err := tr.RecordImagePulled(img, ref, benchCred(tr.hasher, i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkStartup opens a store of n records and loads it into memory; it
// reports the bytes each record takes on disk and in memory.
func BenchmarkStartup(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			populate(b, dir, n)
			fi, err := os.Stat(filepath.Join(dir, StoreFile))
			if err != nil {
				b.Fatal(err)
			}
			s, err := openBoltForBench(dir)
			if err != nil {
				b.Fatal(err)
			}
			var used int64
			_ = s.db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
			s.close()
			var before, after runtime.MemStats
			var cpu time.Duration // CPU time of the starts, on every core: a figure that a loaded machine bends less
			b.ResetTimer()
			for b.Loop() {
				runtime.GC()
				runtime.ReadMemStats(&before)
				c0 := cpuTime()
				tr, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
				if err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - c0
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				if got := tr.Status().Records; got != n {
					b.Fatalf("loaded %d records, want %d", got, n)
				}
				runtime.KeepAlive(tr)
				tr.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(fi.Size())/float64(n), "file-B/record")
			b.ReportMetric(float64(used)/float64(n), "used-B/record")
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "mem-B/record")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}
