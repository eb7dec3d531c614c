package credentialprovider_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// gate holds the test plugin's runs (its -gate flag) until the test has
// seen every look-up it wants coalesced join them: no plugin delay has to
// outlast the look-ups' arrival.
type gate string

func newGate(t *testing.T) gate {
	t.Helper()
	g := gate(filepath.Join(t.TempDir(), "gate"))
	g.open(t, 0)
	return g
}

// open lets the runs numbered up to n answer.
func (g gate) open(t *testing.T, n int) {
	t.Helper()
	tmp := string(g) + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(strconv.Itoa(n)), 0o600))
	require.NoError(t, os.Rename(tmp, string(g)))
}

// waitForCallers waits until the runs of provider p in flight have these
// numbers of look-ups waiting for them (in increasing order).
func waitForCallers(t *testing.T, m *cp.Manager, p string, want ...int) {
	t.Helper()
	require.Eventually(t, func() bool { return slices.Equal(m.Callers(p), want) }, eventBound, time.Millisecond,
		"look-ups waiting for each run: want %v, have %v", want, m.Callers(p))
}

// startLookups starts one look-up per image concurrently, released
// together; wait returns their credentials once all have returned.
func startLookups(t *testing.T, m *cp.Manager, images []string) (wait func() [][]credential.Credential) {
	t.Helper()
	start := make(chan struct{})
	results := make([][]credential.Credential, len(images))
	errs := make([]error, len(images))
	var wg sync.WaitGroup
	for i, img := range images {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = m.ForPod(cp.PodInfo{Namespace: "ns", Name: fmt.Sprint("pod", i)}).Lookup(bg, img)
		}()
	}
	close(start)
	return func() [][]credential.Credential {
		t.Helper()
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "look-up %d", i)
		}
		return results
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestConcurrentLookupsRunOnce(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		cache    time.Duration
		images   []string
		wantRuns int
	}{
		{
			name:     "100 look-ups of one image",
			cache:    time.Minute,
			images:   repeat("registry.example/team/app:v1", 100),
			wantRuns: 1,
		},
		{
			// No cache: only the coalescing of concurrent look-ups keeps
			// this at one run.
			name:     "100 look-ups of one image, uncached response",
			args:     []string{"-duration", "0s"},
			cache:    time.Minute,
			images:   repeat("registry.example/team/app", 100),
			wantRuns: 1,
		},
		{
			name:  "Registry-keyed plugin, 50 images of one registry, first response",
			args:  []string{"-key-type", "Registry", "-auth-keys", "{registry}"},
			cache: time.Minute,
			images: func() []string {
				var out []string
				for i := range 50 {
					out = append(out, fmt.Sprintf("registry.example/team/app%d:v1", i))
				}
				return out
			}(),
			wantRuns: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			g := newGate(t)
			m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, tt.cache, append([]string{"-gate", string(g)}, tt.args...)...)})
			wait := startLookups(t, m, tt.images)
			waitForCallers(t, m, "p", len(tt.images))
			g.open(t, 1)
			for i, got := range wait() {
				assert.Len(t, got, 1, "credentials of look-up %d", i)
			}
			assert.Len(t, e.runs(t), tt.wantRuns, "plugin runs")
		})
	}
}

// An Image-keyed plugin coalesced per registry on its first run must still
// give every image its own credentials: each other image runs once more.
func TestFirstRunCoalescingIsSafeForImageKeys(t *testing.T) {
	e := newEnv(t)
	g := newGate(t)
	m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute, "-gate", string(g))})
	var images []string
	for i := range 5 {
		images = append(images, fmt.Sprintf("registry.example/app%d", i))
	}
	images = append(images, images...) // two look-ups per image
	wait := startLookups(t, m, images)
	waitForCallers(t, m, "p", 10) // one run for the registry
	g.open(t, 1)
	// Its answer is for one image: the look-ups of the four others run
	// again, two to a run.
	waitForCallers(t, m, "p", 2, 2, 2, 2)
	g.open(t, 5)
	for i, got := range wait() {
		img := images[i]
		assertCreds(t, e.hasher, got, []wantCred{good(img, img, "registry.example", "p")})
	}
	assert.Len(t, e.runs(t), 5, "one run per image")

	// The provider now knows it answers per image: no more coalescing per
	// registry, and cached images do not run again.
	g.open(t, 7)
	results := startLookups(t, m, append(images, "registry.example/new1", "registry.example/new2"))()
	assert.Len(t, results, 12)
	assert.Len(t, e.runs(t), 7)
}

// Once a plugin has answered with a Registry key, concurrent look-ups for
// different images of another registry are coalesced into one run too.
func TestRegistryKeyedCoalescingAfterFirstResponse(t *testing.T) {
	e := newEnv(t)
	g := newGate(t)
	m := e.manager(t, []cp.Provider{e.provider("p", []string{"*.example"}, time.Minute,
		"-gate", string(g), "-key-type", "Registry", "-auth-keys", "{registry}")})
	g.open(t, 1)
	_, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "first.example/app")
	require.NoError(t, err)
	var images []string
	for i := range 50 {
		images = append(images, fmt.Sprintf("second.example/app%d", i))
	}
	wait := startLookups(t, m, images)
	waitForCallers(t, m, "p", 50)
	g.open(t, 2)
	for i, got := range wait() {
		assert.Len(t, got, 1, "credentials of look-up %d", i)
	}
	assert.Len(t, e.runs(t), 2)
}
