package credtracker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
)

// tenantRecord is an image's record as serve keeps it when tenants
// tenants each pulled it with their own secret (bench/serve's store).
func tenantRecord(i, tenants int) *ImageRecord {
	at := time.Unix(1_700_000_000+int64(i), 0).UTC()
	rr := &RepositoryRecord{Updated: at}
	for k := range tenants {
		var h credential.Hash
		h[0], h[1], h[2] = byte(i), byte(i>>8), byte(k)
		rr.Secrets = append(rr.Secrets, SecretEntry{Namespace: fmt.Sprintf("tenant-%d", k), Name: "regcred", UID: fmt.Sprintf("uid-%d-%d", k, i), Hash: h, Verified: at})
	}
	return &ImageRecord{
		ImageRef:     fmt.Sprintf("sha256:%064x", i+1),
		Updated:      at,
		Repositories: map[string]*RepositoryRecord{fmt.Sprintf("registry.example/team-%d/app", i%50): rr},
	}
}

// writeTenantStore writes a store of images records of tenants entries
// each under dir, a transaction of 500 records at a time (a store written
// as pulls come has the same pages in use), and returns them in ref order.
func writeTenantStore(t *testing.T, dir string, images, tenants int) []ImageRecord {
	t.Helper()
	h, _, err := credential.LoadOrCreateHasher(filepath.Join(dir, HashKeyFile))
	require.NoError(t, err)
	s, err := newBenchStore(dir, h)
	require.NoError(t, err)
	var want, put []*ImageRecord
	for i := range images {
		r := tenantRecord(i, tenants)
		want, put = append(want, r), append(put, r)
		if len(put) == 500 || i == images-1 {
			require.NoError(t, s.apply(put, nil, nil))
			put = put[:0]
		}
	}
	require.NoError(t, s.close())
	out := make([]ImageRecord, 0, len(want))
	for _, r := range want {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b ImageRecord) int { return strings.Compare(a.ImageRef, b.ImageRef) })
	return out
}

func storeSize(t *testing.T, dir string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, StoreFile))
	require.NoError(t, err)
	return fi.Size()
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestStartUpNeverHoldsTheStore: a start reads the store a buffer at a
// time. While it reads, the live heap (measured after a collection before
// each batch is decoded) is the index being built plus the read buffer,
// never the file: its peak stays within a bound that does not grow with
// the store, above the live heap once started (the index). The store is
// several times that bound, so a start that read the whole file (as
// pullguard did before) fails.
func TestStartUpNeverHoldsTheStore(t *testing.T) {
	dir := t.TempDir()
	want := writeTenantStore(t, dir, 6000, 10)
	data, err := os.ReadFile(filepath.Join(dir, StoreFile))
	require.NoError(t, err)
	f, err := parseBoltFile(data)
	require.NoError(t, err)
	size := int64(f.pages) * int64(os.Getpagesize()) // the pages in use
	data, f = nil, nil

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // two workers, two partly filled chunks
	oldBuf := storeLoadBuffer
	storeLoadBuffer = 256 << 10
	t.Cleanup(func() { storeLoadBuffer = oldBuf })
	// What the load may hold besides the index: its read buffer, each
	// worker's partly filled chunk, the batch's decoded records and the
	// pending slots; and 1 MiB for the collector's and the test's noise.
	slack := int64(storeLoadBuffer + 2*bulkChunk + 1<<20)
	require.Greater(t, size, 2*slack, "the store must be much larger than the load's bound for the test to show anything")

	base := liveHeap()
	var peak int64
	batches := 0
	loadHook = func() {
		batches++
		peak = max(peak, liveHeap()-base)
	}
	t.Cleanup(func() { loadHook = nil })
	trI, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	loadHook = nil
	tr := trI.(*tracker)
	t.Cleanup(func() { tr.Close() })
	started := liveHeap() - base

	t.Logf("store %.1f MiB in use, %d batches; live heap: peak while reading %.1f MiB, once started %.1f MiB", mib(size), batches, mib(peak), mib(started))
	assert.Greater(t, batches, int(size/int64(storeLoadBuffer))/2, "the store was read in batches")
	assert.LessOrEqual(t, peak, started+slack, "the peak while reading is the index and a bounded buffer, not the file (%.1f MiB)", mib(size))
	require.Equal(t, want, tr.Records())
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// TestImportOfEveryImageKeepsTheStoreSize: the switch-over marks every
// present image of unknown origin, rewriting every record. Written a
// batch at a time, the old pages of a batch are free for the next, and
// the store file stays within 10 % of its size (one transaction grew it
// to more than twice). Every record is marked, after a restart too.
func TestImportOfEveryImageKeepsTheStoreSize(t *testing.T) {
	dir := t.TempDir()
	want := writeTenantStore(t, dir, 3000, 10)
	before := storeSize(t, dir)

	tr, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	var refs []string
	for _, r := range want {
		refs = append(refs, r.ImageRef)
	}
	require.NoError(t, tr.(Importer).Import(nil, refs, "present at the switch-over"))
	require.NoError(t, tr.Close())
	after := storeSize(t, dir)
	t.Logf("store %.1f MiB before, %.1f MiB after", mib(before), mib(after))
	assert.LessOrEqual(t, after, before+before/10)

	tr, err = New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	got := tr.Records()
	require.Len(t, got, len(want))
	for i, r := range got {
		assert.Equal(t, "present at the switch-over", r.UnknownOrigin, r.ImageRef)
		assert.Equal(t, want[i].Repositories, r.Repositories, r.ImageRef)
	}
}

// sparseStore writes a store whose every record was then rewritten in
// one transaction (as a migration, or the import of an older pullguard,
// did): about half its pages are free. It returns the records.
func sparseStore(t *testing.T, dir string, images int) []ImageRecord {
	t.Helper()
	want := writeTenantStore(t, dir, images, 10)
	h, _, err := credential.LoadOrCreateHasher(filepath.Join(dir, HashKeyFile))
	require.NoError(t, err)
	sl := newSealer(h)
	gen, err := openGenFile(filepath.Join(dir, GenerationFile), sl, true)
	require.NoError(t, err)
	s, err := openStore(filepath.Join(dir, StoreFile), sl, gen, false, nil)
	require.NoError(t, err)
	var put []*ImageRecord
	for i := range want {
		want[i].UnknownOrigin = "rewritten"
		put = append(put, &want[i])
	}
	require.NoError(t, s.apply(put, nil, nil))
	_, pages, free, err := s.usage()
	require.NoError(t, err)
	require.True(t, sparse(pages, free), "%d of %d bytes free", free, pages)
	require.NoError(t, s.close())
	return want
}

// TestSparseStoreIsCompacted: a start gives a store's free pages back to
// the file system when they are a large part of it, and every record is
// kept, also at the next start.
func TestSparseStoreIsCompacted(t *testing.T) {
	dir := t.TempDir()
	want := sparseStore(t, dir, 3000)
	before := storeSize(t, dir)

	tr, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	assert.Equal(t, want, tr.Records())
	after := storeSize(t, dir)
	t.Logf("store %.1f MiB before, %.1f MiB after", mib(before), mib(after))
	assert.Less(t, after, before*2/3)
	// The compacted store takes writes, durably.
	extra := tenantRecord(10_000, 1)
	require.NoError(t, tr.(Importer).Import([]ImportedPull{{Image: "registry.example/x/y:1", ImageRef: extra.ImageRef}}, nil, ""))
	require.NoError(t, tr.Close())
	_, err = os.Stat(filepath.Join(dir, StoreFile+compactSuffix))
	assert.ErrorIs(t, err, os.ErrNotExist, "no copy is left")

	tr, err = New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	got := tr.Records()
	require.Len(t, got, len(want)+1)
	assert.Equal(t, storeSize(t, dir), after, "not compacted again")
}

// compactSteps are the steps of a compaction, in order.
var compactSteps = []string{"copying", "copied", "renamed", "switched"}

// TestCompactionFailsCleanlyAtEveryStep: a compaction that fails at any
// step is no failure of the start: before the rename the store is the
// old file, after it the copy, each with every record, and the tracker
// writes to the store that is in place (a write after the start is there
// at the next start).
func TestCompactionFailsCleanlyAtEveryStep(t *testing.T) {
	orig := t.TempDir()
	want := sparseStore(t, orig, 2000)
	for i, step := range compactSteps {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.CopyFS(dir, os.DirFS(orig)))
			before := storeSize(t, dir)
			compactHook = func(s string) error {
				if s == step {
					return errInjected
				}
				return nil
			}
			t.Cleanup(func() { compactHook = nil })
			tr, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
			require.NoError(t, err)
			compactHook = nil
			if i < slices.Index(compactSteps, "renamed") {
				assert.Equal(t, before, storeSize(t, dir), "the store is the old file")
			} else {
				assert.Less(t, storeSize(t, dir), before, "the store is the copy")
			}
			_, err = os.Stat(filepath.Join(dir, StoreFile+compactSuffix))
			assert.ErrorIs(t, err, os.ErrNotExist, "no copy is left")
			assert.Equal(t, want, tr.Records())
			extra := tenantRecord(10_000, 1)
			require.NoError(t, tr.(Importer).Import([]ImportedPull{{Image: "registry.example/x/y:1", ImageRef: extra.ImageRef}}, nil, ""))
			require.NoError(t, tr.Close())

			tr, err = New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
			require.NoError(t, err)
			defer tr.Close()
			got := tr.Records()
			require.Len(t, got, len(want)+1)
			i := slices.IndexFunc(got, func(r ImageRecord) bool { return r.ImageRef == extra.ImageRef })
			require.GreaterOrEqual(t, i, 0, "the write after the failed compaction was kept")
			assert.Contains(t, got[i].Repositories, "registry.example/x/y")
		})
	}
}

const (
	compactCrashDirEnv  = "CREDTRACKER_COMPACT_CRASH_DIR"
	compactCrashStepEnv = "CREDTRACKER_COMPACT_CRASH_STEP"
)

// TestCompactionCrashChild is the child process of
// TestCompactionKilledAtEveryStep: it starts on a sparse store, stops at
// the compaction's step it is given (it says so, then waits to be
// killed).
func TestCompactionCrashChild(t *testing.T) {
	dir := os.Getenv(compactCrashDirEnv)
	if dir == "" {
		t.Skip("the child process of TestCompactionKilledAtEveryStep")
	}
	compactHook = stopAt(os.Getenv(compactCrashStepEnv))
	_, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
	fmt.Printf("done: %v\n", err)
}

// TestCompactionKilledAtEveryStep kills a start at each step of its
// compaction (SIGKILL, in a child process): the next start finds the old
// store or the compacted one, never a mix, with every record, and is not
// a recovery.
func TestCompactionKilledAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills child processes")
	}
	orig := t.TempDir()
	want := sparseStore(t, orig, 2000)
	for _, step := range compactSteps {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.CopyFS(dir, os.DirFS(orig)))
			before := storeSize(t, dir)
			killChildAt(t, "TestCompactionCrashChild", step, compactCrashDirEnv+"="+dir, compactCrashStepEnv+"="+step)
			if step == "copying" || step == "copied" {
				assert.Equal(t, before, storeSize(t, dir), "the store is the old file")
			} else {
				assert.Less(t, storeSize(t, dir), before, "the store is the copy")
			}

			tr, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
			require.NoError(t, err)
			defer tr.Close()
			assert.True(t, tr.Status().RecoveredAt.IsZero(), "not a recovery")
			assert.Equal(t, want, tr.Records())
			_, err = os.Stat(filepath.Join(dir, StoreFile+compactSuffix))
			assert.ErrorIs(t, err, os.ErrNotExist, "no copy is left")
		})
	}
}

// stopAt is the hook of a test child that killChildAt kills: at step, it
// says so and waits to be killed (its stdin never gets a byte).
func stopAt(step string) func(string) error {
	return func(s string) error {
		if s == step {
			fmt.Printf("at %s\n", s)
			_, _ = os.Stdin.Read(make([]byte, 1))
		}
		return nil
	}
}

// killChildAt runs the test child of this test binary with env, and kills
// it (SIGKILL) once it prints "at <step>"; it fails unless the child got
// there.
func killChildAt(t *testing.T, child, step string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	reached := false
	for lines := bufio.NewScanner(stdout); lines.Scan(); {
		if lines.Text() == "at "+step {
			reached = true
			require.NoError(t, cmd.Process.Kill())
		}
	}
	_ = cmd.Wait()
	require.True(t, reached, "the child reached %q", step)
}
