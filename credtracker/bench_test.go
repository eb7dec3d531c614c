package credtracker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	s, err := openStore(filepath.Join(dir, StoreFile), false)
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

// decideWorkload is a set of requests and the order to send them in.
type decideWorkload struct {
	reqs  []Request
	order []uint32
}

// uniformWorkload draws requests uniformly over all n records: the node's
// worst case, every decision a cold lookup.
func uniformWorkload(tr *tracker, n int) decideWorkload {
	w := decideWorkload{reqs: make([]Request, n), order: make([]uint32, benchOrderLen)}
	for i := range w.reqs {
		w.reqs[i] = benchRequest(tr, i)
	}
	rng := rand.New(rand.NewPCG(3, uint64(n)))
	for k := range w.order {
		w.order[k] = uint32(rng.IntN(n))
	}
	return w
}

// hotWorkload draws requests uniformly over a hot set of min(n, 1024)
// records spread over the store.
func hotWorkload(tr *tracker, n int) decideWorkload {
	hot := min(n, 1024)
	w := decideWorkload{reqs: make([]Request, hot), order: make([]uint32, benchOrderLen)}
	for k := range w.reqs {
		w.reqs[k] = benchRequest(tr, (k*7919)%n)
	}
	rng := rand.New(rand.NewPCG(5, uint64(n)))
	for k := range w.order {
		w.order[k] = uint32(rng.IntN(hot))
	}
	return w
}

// touchRequest reads what Decide reads of a request that is not the
// tracker's own memory: the Request itself, its strings and its
// credentials. Its cost is the harness's, subtracted from the figures.
//
//go:noinline
func touchRequest(req *Request) uint {
	s := uint(req.Image[0]) + uint(req.Image[len(req.Image)-1]) + uint(req.ImageRef[0]) + uint(req.ImageRef[len(req.ImageRef)-1])
	s += uint(req.Names[0][len(req.Names[0])-1]) + uint(req.PullPolicy[0])
	creds := req.Credentials()
	src := &creds[0].Source
	s += uint(src.Namespace[0]) + uint(src.Name[0]) + uint(src.UID[0]) + uint(src.UID[len(src.UID)-1])
	return s + uint(creds[0].Hash[0]) + uint(creds[0].Hash[31])
}

var benchSink uint

// runDecide times the harness alone (reading the next request) over b.N
// requests, then the harness and Decide together; it reports the harness
// (harness-ns/op) and the difference (net-ns/op, the decision's own cost:
// the request is in the caches, as on a node that has just built it), in
// wall time and in the thread's CPU time (cpu-net-ns/op: steadier when
// other processes share the cores). ns/op includes the harness.
func runDecide(b *testing.B, tr *tracker, w decideWorkload) {
	if d := tr.Decide(w.reqs[0]); d.Reason != ReasonCredentialMatch {
		b.Fatalf("decision %v, want a credential match", d)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mask := uint32(len(w.order) - 1)
	var sink uint
	cpu0, start := threadCPU(), time.Now()
	for i := 0; i < b.N; i++ {
		sink += touchRequest(&w.reqs[w.order[uint32(i)&mask]])
	}
	harness, harnessCPU := time.Since(start), threadCPU()-cpu0
	benchSink += sink
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 = threadCPU()
	for i := 0; i < b.N; i++ {
		// A node decides on a request it has just built: read it first
		// (the harness's cost, subtracted below), then decide.
		req := &w.reqs[w.order[uint32(i)&mask]]
		sink += touchRequest(req)
		tr.Decide(*req)
	}
	b.StopTimer()
	cpu := threadCPU() - cpu0
	benchSink += sink
	n := float64(b.N)
	h := float64(harness.Nanoseconds()) / n
	b.ReportMetric(h, "harness-ns/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n-h, "net-ns/op")
	b.ReportMetric(float64(cpu.Nanoseconds()-harnessCPU.Nanoseconds())/n, "cpu-net-ns/op")
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
			name string
			make func(*tracker, int) decideWorkload
		}{{"uniform", uniformWorkload}, {"hot1024", hotWorkload}} {
			w := wl.make(tr, n)
			b.Run(fmt.Sprintf("workload=%s/records=%d", wl.name, n), func(b *testing.B) { runDecide(b, tr, w) })
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
			w := uniformWorkload(tr, n)
			var seq atomic.Uint32
			mask := uint32(len(w.order) - 1)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				k := seq.Add(1 << 16)
				for pb.Next() {
					tr.Decide(w.reqs[w.order[k&mask]])
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
			s, err := openStore(filepath.Join(dir, StoreFile), true)
			if err != nil {
				b.Fatal(err)
			}
			var used int64
			_ = s.db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
			s.close()
			var before, after runtime.MemStats
			b.ResetTimer()
			for b.Loop() {
				runtime.GC()
				runtime.ReadMemStats(&before)
				tr, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
				if err != nil {
					b.Fatal(err)
				}
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
		})
	}
}
