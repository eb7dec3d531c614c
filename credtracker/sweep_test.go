package credtracker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/pullguard/pullguard/pkg/credential"
)

// The sweep damages a store in every way a failing disk could, one change
// at a time, and opens it after each: it must either be detected (and the
// store rebuilt, every present image needing verification) or change
// nothing the tracker reads. It runs in a child process (this test binary
// again), so that a fault in a memory map would show as the child's
// death, not as a passing test; the parent bounds its time (no hang).
const (
	sweepDirEnv     = "CREDTRACKER_SWEEP_DIR"
	sweepModeEnv    = "CREDTRACKER_SWEEP_MODE"
	sweepSamplesEnv = "CREDTRACKER_SWEEP_SAMPLES"
	// SweepLargeEnv, set to a number of positions, runs the sweep of a
	// store of 10 000 records (make sweep).
	sweepLargeEnv = "CREDTRACKER_SWEEP_LARGE"
	// sweepMarker is in every secret's namespace: it must never appear in
	// a log line or an error.
	sweepMarker = "q7zmarker"
)

var (
	sweepImage = "registry.example/team-a/app:v1"
	sweepRef   = "sha256:" + strings.Repeat("a1", 32)
	sweepBase  = "registry.example/preloaded/base:1"
	sweepBRef  = "sha256:" + strings.Repeat("b2", 32)
)

type sweepResult struct {
	Size, Used, Mutations, Detected, Unchanged, Changed int
	FullStarts, FullRecovered, Admissions               int
	MaxOpen, MaxStart                                   time.Duration
	Failures                                            []string
}

func (r *sweepResult) fail(format string, args ...any) {
	if len(r.Failures) < 20 {
		r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
	}
}

func sweepSecret(h *credential.Hasher, tenant string) credential.Credential {
	auth := credential.AuthConfig{Username: "user-" + tenant, Password: "pw-" + tenant}
	return credential.Credential{Registry: "registry.example", Auth: auth, Source: credential.Source{Kind: credential.SourceSecret, Namespace: tenant + "-" + sweepMarker, Name: "regcred", UID: "uid-" + tenant}, Hash: h.Hash("registry.example", auth)}
}

func sweepInventory() ImageInventory {
	return ImageInventoryFunc(func(context.Context) ([]Image, error) {
		return []Image{{Ref: sweepRef, Names: []string{sweepImage}}, {Ref: sweepBRef, Names: []string{sweepBase}}}, nil
	})
}

// buildSweepStore makes the store to damage: tenant A's image pulled with
// its secret, n-1 more records, and a pull intent left over.
func buildSweepStore(t testing.TB, dir string, n int) {
	tr, err := New(context.Background(), Config{Dir: dir}, sweepInventory(), WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	tt := tr.(*tracker)
	require.NoError(t, tt.RecordPullIntent(sweepImage))
	require.NoError(t, tt.RecordImagePulled(sweepImage, sweepRef, sweepSecret(tt.hasher, "team-a")))
	if n > 1 {
		// The bulk in one transaction, as a seed writes it.
		now := time.Now()
		var put []*ImageRecord
		for i := 1; i < n; i++ {
			c := sweepSecret(tt.hasher, fmt.Sprintf("tenant-%d", i%500))
			repo := fmt.Sprintf("registry.example/tenant-%d/app-%d", i%500, i)
			put = append(put, (*ImageRecord)(nil).withPull(fmt.Sprintf("sha256:%064x", i), repo, c.Source, c.Hash, now, DefaultMaxEntries, 0))
		}
		require.NoError(t, tt.store.apply(put, nil, nil))
	}
	require.NoError(t, tt.RecordPullIntent("registry.example/team-c/left:1"))
	require.NoError(t, tr.Close())
}

func TestStoreSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process over many damaged stores")
	}
	dir := t.TempDir()
	buildSweepStore(t, dir, 2)
	every := 1 // one bit of every byte
	switch {
	case os.Getenv(sweepLargeEnv) != "":
		every = 0 // every bit
	case raceEnabled:
		every = 9 // prime to 8: the bit flipped still changes from byte to byte
	}
	res := runSweep(t, dir, "bits", every)
	t.Logf("small store: %+v", res)
	assert.Positive(t, res.Detected)
	if every == 0 {
		assert.Greater(t, res.Mutations, 8*res.Size, "every bit and every page boundary")
	} else {
		assert.Greater(t, res.Mutations, res.Size/every, "a bit of every byte and every page boundary")
	}
}

func TestStoreSweepLarge(t *testing.T) {
	samples := 20 // always on: a cheap subset
	if raceEnabled {
		samples = 2
	}
	if v := os.Getenv(sweepLargeEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		samples = n
	} else if testing.Short() {
		t.Skip("runs a child process over many damaged stores")
	}
	dir := t.TempDir()
	buildSweepStore(t, dir, 10_000)
	res := runSweep(t, dir, "sample", samples)
	t.Logf("store of 10 000 records: %+v", res)
	assert.Equal(t, samples, res.Mutations)
}

func runSweep(t *testing.T, dir, mode string, samples int) sweepResult {
	start := time.Now()
	args := []string{"-test.run=^TestStoreSweepChild$", "-test.count=1", "-test.v"}
	if d, ok := t.Deadline(); ok {
		// The child ends (a panic naming what it ran) when this test would.
		args = append(args, "-test.timeout="+time.Until(d).String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), sweepDirEnv+"="+dir, sweepModeEnv+"="+mode, sweepSamplesEnv+"="+strconv.Itoa(samples))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the sweep's process failed, crashed or hung:\n%s", tail(out))
	assert.NotContains(t, string(out), sweepMarker, "stored bytes reached a log line or an error")
	var res sweepResult
	i := bytes.LastIndex(out, []byte("SWEEP "))
	require.GreaterOrEqual(t, i, 0, "no result:\n%s", tail(out))
	line, _, _ := bytes.Cut(out[i+len("SWEEP "):], []byte("\n"))
	require.NoError(t, json.Unmarshal(line, &res))
	t.Logf("%d damaged stores in %s", res.Mutations, time.Since(start).Round(time.Millisecond))
	assert.Empty(t, res.Failures)
	assert.Zero(t, res.Changed, "a change that was neither detected nor harmless")
	assert.Zero(t, res.Admissions, "tenant B got tenant A's image")
	assert.Equal(t, res.Mutations, res.Detected+res.Unchanged)
	assert.Positive(t, res.FullStarts)
	return res
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// TestStoreSweepChild is the child process of the sweeps.
func TestStoreSweepChild(t *testing.T) {
	src := os.Getenv(sweepDirEnv)
	if src == "" {
		t.Skip("the child process of TestStoreSweep")
	}
	samples, _ := strconv.Atoi(os.Getenv(sweepSamplesEnv))
	orig, err := os.ReadFile(filepath.Join(src, StoreFile))
	require.NoError(t, err)
	key, err := os.ReadFile(filepath.Join(src, HashKeyFile))
	require.NoError(t, err)
	gen, err := os.ReadFile(filepath.Join(src, GenerationFile))
	require.NoError(t, err)
	h, err := credential.NewHasher(key)
	require.NoError(t, err)
	sl := newSealer(h)

	scratch := t.TempDir()
	put := func(dir string, data []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, HashKeyFile), key, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, GenerationFile), gen, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, StoreFile), data, 0o600))
	}
	put(scratch, orig)
	// The node's generation, read once; the lock is not kept, so that
	// sweepTryOpen can take it.
	g, err := openGenFile(filepath.Join(scratch, GenerationFile), sl, false)
	require.NoError(t, err)
	require.NoError(t, g.close())
	want := sweepOpen(t, scratch, sl) // which writes: each damaged store is put in place with the original files
	require.NotNil(t, want)
	require.NotEmpty(t, want.records)

	// The damage: every bit, then a cut at every page boundary; or random
	// bits of a large store.
	type mutation struct {
		bit, cut int // a bit to flip, or the length to cut the file to
	}
	var muts []mutation
	ps := os.Getpagesize()
	if os.Getenv(sweepModeEnv) == "bits" {
		// Every bit (make sweep); by default one bit of every byte, a
		// different one from byte to byte; under the race detector (make
		// test), one bit of every ninth byte.
		every, _ := strconv.Atoi(os.Getenv(sweepSamplesEnv))
		for b := range 8 * len(orig) {
			if every == 0 || (b%8 == (b/8)%8 && (b/8)%every == 0) {
				muts = append(muts, mutation{bit: b, cut: -1})
			}
		}
		for c := 0; c < len(orig); c += ps {
			muts = append(muts, mutation{bit: -1, cut: c})
		}
	} else {
		// Positions in the pages in use: bbolt grows the file ahead, and
		// nothing reads past its high-water mark.
		f, err := parseBoltFile(orig)
		require.NoError(t, err)
		used := int(f.pages) * ps
		rng := rand.New(rand.NewPCG(uint64(len(orig)), 7))
		for range samples {
			muts = append(muts, mutation{bit: rng.IntN(8 * used), cut: -1})
		}
	}
	// Every damaged store is checked as a start checks it; one accepted
	// store in openStride is also opened by bbolt, as a start then does,
	// and written to (FuzzStoreFile shows bbolt opens and writes whatever
	// the check accepts); and
	// some get a full tracker start (recovery, decisions, a write, a
	// restart), each of which costs a dozen fsyncs: about 40 of those the
	// check accepts, and one in 1 000 mutations among those it refuses.
	acceptStride, refuseStride, openStride := max(1, len(muts)/40), max(1, len(muts)/1000), 1
	if len(muts) > 5_000 || (raceEnabled && os.Getenv(sweepModeEnv) == "bits") {
		// Under the race detector (make test) the bit sweep's stores are
		// all checked, and one in four opened by bbolt.
		openStride = 4
	}
	refused := 0

	res := sweepResult{Size: len(orig)}
	if f, err := parseBoltFile(orig); err == nil {
		res.Used = int(f.pages) * ps
	}
	accepted := 0
	data := make([]byte, len(orig))
	for _, m := range muts {
		data = append(data[:0], orig...)
		if m.bit >= 0 {
			data[m.bit/8] ^= 1 << (m.bit % 8)
		} else {
			data = data[:m.cut]
		}
		what := fmt.Sprintf("bit %d", m.bit)
		if m.bit < 0 {
			what = fmt.Sprintf("cut at %d", m.cut)
		}
		res.Mutations++
		// The time of a start's checks and of bbolt's open; not of the
		// test's own file writes.
		start := time.Now()
		v, err := verifyStore(data, StoreFile, sl, g, nil)
		got := v.contents
		took := time.Since(start)
		if err == nil {
			if accepted++; accepted%openStride == 0 {
				put(scratch, data)
				var c *contents
				var open time.Duration
				if c, open, err = sweepTryOpen(scratch, sl); err == nil {
					got = *c
				}
				took += open
			}
		}
		res.MaxOpen = max(res.MaxOpen, took)
		switch {
		case errors.Is(err, errStoreCorrupt):
			res.Detected++
			if strings.Contains(err.Error(), sweepMarker) {
				res.fail("%s: the error quotes the store", what)
			}
		case err != nil:
			res.fail("%s: not a corruption error: %v", what, err)
		case !sameContents(&got, want):
			res.Changed++
			res.fail("%s: the store changed and was accepted", what)
		default:
			res.Unchanged++
		}
		full := err == nil && accepted%acceptStride == 1%acceptStride
		if err != nil {
			refused++
			full = refused%refuseStride == 1%refuseStride
		}
		if full {
			sweepFullStart(t, data, put, &res, what)
		}
	}
	out, err := json.Marshal(res)
	require.NoError(t, err)
	fmt.Printf("SWEEP %s\n", out)
}

func sweepOpen(t *testing.T, dir string, sl *sealer) *contents {
	c, _, err := sweepTryOpen(dir, sl)
	require.NoError(t, err)
	return c
}

// sweepTryOpen opens the store as New does (bbolt included, when the file
// passes), returns what it read, and writes to every bucket (without
// fsync: the next damaged store replaces the file).
func sweepTryOpen(dir string, sl *sealer) (*contents, time.Duration, error) {
	start := time.Now()
	gen, err := openGenFile(filepath.Join(dir, GenerationFile), sl, true)
	if err != nil {
		return nil, 0, err
	}
	s, err := openStore(filepath.Join(dir, StoreFile), sl, gen, false, nil)
	took := time.Since(start)
	if err != nil {
		gen.close()
		return nil, took, err
	}
	c, _ := s.load()
	s.db.NoSync = true
	r := (*ImageRecord)(nil).withPulledUnknown(sweepBRef, "registry.example/preloaded/base", time.Now())
	err = s.apply(append(slices.Clone(c.records[:min(50, len(c.records))]), r), nil, nil)
	if err == nil {
		err = s.putIntent("registry.example/sweep/x:1", time.Unix(1, 0))
	}
	if err == nil {
		err = s.putStatus(storeStatus{RecoveryReason: "sweep"})
	}
	if cerr := s.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, took, fmt.Errorf("write after open: %w", err)
	}
	return &c, took, nil
}

func sameContents(a, b *contents) bool {
	sorted := func(c *contents) []*ImageRecord {
		r := slices.Clone(c.records)
		slices.SortFunc(r, func(x, y *ImageRecord) int { return strings.Compare(x.ImageRef, y.ImageRef) })
		return r
	}
	return reflect.DeepEqual(sorted(a), sorted(b)) && reflect.DeepEqual(a.intents, b.intents) &&
		reflect.DeepEqual(a.unreadable, b.unreadable) && reflect.DeepEqual(a.status, b.status)
}

// sweepFullStart starts a tracker over the damaged store and checks that
// tenant B never gets tenant A's image, that it serves, and that its
// store is sound at the next start.
func sweepFullStart(t *testing.T, data []byte, put func(string, []byte), res *sweepResult, what string) {
	dir := t.TempDir()
	put(dir, data)
	var logs bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs), textlogger.Verbosity(4)))
	start := time.Now()
	tr, err := New(context.Background(), Config{Dir: dir}, sweepInventory(), WithLogger(logger))
	res.MaxStart = max(res.MaxStart, time.Since(start))
	if err != nil {
		res.fail("%s: start failed: %v", what, err)
		return
	}
	res.FullStarts++
	st := tr.Status()
	if !st.RecoveredAt.IsZero() {
		res.FullRecovered++
	}
	tenantB := sweepSecret(tr.Hasher(), "team-b")
	for _, req := range []Request{
		{Image: sweepImage, ImageRef: sweepRef, Names: []string{sweepImage}, PullPolicy: corev1.PullNever},
		{Image: sweepImage, ImageRef: sweepRef, Names: []string{sweepImage}, PullPolicy: corev1.PullIfNotPresent, Credentials: func() []credential.Credential { return []credential.Credential{tenantB} }},
	} {
		if d := tr.Decide(req); d.Action == UseImage {
			res.Admissions++
			res.fail("%s: tenant B admitted (%s)", what, d.Reason)
		}
	}
	// It keeps serving: a write, then a start over what it wrote.
	img := "registry.example/team-a/next:v1"
	if err := tr.RecordPullIntent(img); err == nil {
		err = tr.RecordImagePulled(img, "sha256:"+strings.Repeat("c3", 32), sweepSecret(tr.Hasher(), "team-a"))
		if err != nil {
			res.fail("%s: write failed: %v", what, err)
		}
	} else {
		res.fail("%s: write failed: %v", what, err)
	}
	require.NoError(t, tr.Close())
	tr, err = New(context.Background(), Config{Dir: dir}, sweepInventory(), WithLogger(logger))
	if err != nil {
		res.fail("%s: restart failed: %v", what, err)
		return
	}
	if again := tr.Status(); !again.RecoveredAt.Equal(st.RecoveredAt) {
		res.fail("%s: the store the tracker wrote did not pass its own check: %s", what, again.RecoveryReason)
	}
	require.NoError(t, tr.Close())
	if strings.Contains(logs.String(), sweepMarker) || strings.Contains(st.RecoveryReason, sweepMarker) {
		res.fail("%s: stored bytes in a log line or the status", what)
	}
}
