package credentialprovider_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// lookupAll runs one look-up per image concurrently, released together.
func lookupAll(t *testing.T, m *cp.Manager, images []string) [][]credential.Credential {
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
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "look-up %d", i)
	}
	return results
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
			args:     []string{"-mode", "slow", "-delay", "300ms"},
			cache:    time.Minute,
			images:   repeat("registry.example/team/app:v1", 100),
			wantRuns: 1,
		},
		{
			// No cache: only the coalescing of concurrent look-ups keeps
			// this at one run (the plugin is slow enough for all to join).
			name:     "100 look-ups of one image, uncached response",
			args:     []string{"-mode", "slow", "-delay", "1s", "-duration", "0s"},
			cache:    time.Minute,
			images:   repeat("registry.example/team/app", 100),
			wantRuns: 1,
		},
		{
			name:  "Registry-keyed plugin, 50 images of one registry, first response",
			args:  []string{"-mode", "slow", "-delay", "300ms", "-key-type", "Registry", "-auth-keys", "{registry}"},
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
			m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, tt.cache, tt.args...)})
			results := lookupAll(t, m, tt.images)
			for i, got := range results {
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
	m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute, "-mode", "slow", "-delay", "300ms")})
	var images []string
	for i := range 5 {
		images = append(images, fmt.Sprintf("registry.example/app%d", i))
	}
	images = append(images, images...) // two look-ups per image
	results := lookupAll(t, m, images)
	for i, got := range results {
		img := images[i]
		assertCreds(t, e.hasher, got, []wantCred{good(img, img, "registry.example", "p")})
	}
	assert.Len(t, e.runs(t), 5, "one run per image")

	// The provider now knows it answers per image: no more coalescing per
	// registry, and cached images do not run again.
	results = lookupAll(t, m, append(images, "registry.example/new1", "registry.example/new2"))
	assert.Len(t, results, 12)
	assert.Len(t, e.runs(t), 7)
}

// Once a plugin has answered with a Registry key, concurrent look-ups for
// different images of another registry are coalesced into one run too.
func TestRegistryKeyedCoalescingAfterFirstResponse(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t, []cp.Provider{e.provider("p", []string{"*.example"}, time.Minute,
		"-mode", "slow", "-delay", "300ms", "-key-type", "Registry", "-auth-keys", "{registry}")})
	_, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "first.example/app")
	require.NoError(t, err)
	var images []string
	for i := range 50 {
		images = append(images, fmt.Sprintf("second.example/app%d", i))
	}
	for i, got := range lookupAll(t, m, images) {
		assert.Len(t, got, 1, "credentials of look-up %d", i)
	}
	assert.Len(t, e.runs(t), 2)
}
