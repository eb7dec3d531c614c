package credentialprovider_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"

	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// benchManager returns a Manager whose providers have answered for image,
// so look-ups of image are cache hits.
func benchManager(b *testing.B, providers int, image string) *cp.Manager {
	b.Helper()
	e := newEnv(b)
	var ps []cp.Provider
	for i := range providers {
		// Only the last provider matches the image; the others are
		// checked and skipped, as on a node with several providers.
		match := fmt.Sprintf("other%d.example", i)
		if i == providers-1 {
			match = "*.example"
		}
		ps = append(ps, e.provider(fmt.Sprintf("p%d", i), []string{match}, time.Hour, "-key-type", "Registry", "-auth-keys", "{registry},*.example"))
	}
	// The real clock, as in production (the fake clock's Now takes a lock).
	m := e.manager(b, ps, cp.WithClock(clock.RealClock{}))
	got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, image)
	require.NoError(b, err)
	require.Len(b, got, 2)
	return m
}

// BenchmarkLookupCacheHit is one look-up served from the cache: parse (memoized),
// match, cache get, copy of the credentials (one allocation).
func BenchmarkLookupCacheHit(b *testing.B) {
	for _, providers := range []int{1, 4} {
		b.Run(fmt.Sprintf("providers=%d", providers), func(b *testing.B) {
			const img = "registry.example/team/app:v1"
			kr := benchManager(b, providers, img).ForPod(cp.PodInfo{Namespace: "ns", Name: "pod"})
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := kr.Lookup(bg, img); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLookupCacheHitParallel is the same from every core at once.
func BenchmarkLookupCacheHitParallel(b *testing.B) {
	const img = "registry.example/team/app:v1"
	kr := benchManager(b, 1, img).ForPod(cp.PodInfo{Namespace: "ns", Name: "pod"})
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := kr.Lookup(bg, img); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
