package credtracker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
)

var benchSizes = []int{100, 1_000, 10_000, 100_000}

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

// benchRequests are 1024 requests spread over the records: present image,
// the pod holds the credential that pulled it.
func benchRequests(tr *tracker, n int) []Request {
	reqs := make([]Request, 1024)
	for k := range reqs {
		i := (k * 7919) % n
		creds := []credential.Credential{benchCred(tr.hasher, i)}
		reqs[k] = Request{Image: benchImage(i), ImageRef: benchRef(i), Names: []string{benchImage(i)}, PullPolicy: corev1.PullIfNotPresent, Credentials: func() []credential.Credential { return creds }}
	}
	return reqs
}

func BenchmarkDecide(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			tr, _ := openBench(b, n)
			reqs := benchRequests(tr, n)
			if d := tr.Decide(reqs[0]); d.Reason != ReasonCredentialMatch {
				b.Fatalf("decision %v, want a credential match", d)
			}
			b.ReportAllocs()
			b.ResetTimer()
			k := 0
			for b.Loop() {
				tr.Decide(reqs[k&1023])
				k++
			}
		})
	}
}

// BenchmarkDecideParallel shows readers do not wait for each other: ns/op
// falls as goroutines (GOMAXPROCS, -cpu) are added.
func BenchmarkDecideParallel(b *testing.B) {
	tr, _ := openBench(b, 10_000)
	reqs := benchRequests(tr, 10_000)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		k := 0
		for pb.Next() {
			tr.Decide(reqs[k&1023])
			k++
		}
	})
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
