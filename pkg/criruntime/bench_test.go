package criruntime_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkRePullPresentImage measures the verification pull of an image
// that is present: one ping and one HEAD of the manifest with Basic
// credentials against a loopback registry, no blobs.
func BenchmarkRePullPresentImage(b *testing.B) {
	reg := newTestRegistry(b)
	reg.addUser("alice", "alice-pw")
	reg.allow("team-a/app", "alice")
	reg.push(reg.ref("team-a/app:v1"), randomImage(b, 3))
	e := newEmbedded(b, b.TempDir())
	ref, auth := spec(reg.ref("team-a/app:v1")), basic("alice", "alice-pw")
	ctx := context.Background()
	_, err := e.PullImage(ctx, ref, auth, nil)
	require.NoError(b, err)
	reg.reset()

	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.PullImage(ctx, ref, auth, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(reg.count(kindManifest))/float64(b.N), "manifest-req/op")
	b.ReportMetric(float64(reg.count(kindBlob))/float64(b.N), "blob-req/op")
}

// BenchmarkImageStatus measures ImageStatus by canonical name, by a name
// that needs normalizing, and by ID, with a store of n images.
func BenchmarkImageStatus(b *testing.B) {
	for _, n := range []int{1, 100} {
		e := newEmbedded(b, b.TempDir())
		ctx := context.Background()
		var id string
		for i := range n {
			var err error
			id, err = e.Load(ctx, fmt.Sprintf("team-%d/app:v1", i), randomImage(b, 1))
			require.NoError(b, err)
		}
		short := fmt.Sprintf("team-%d/app:v1", n-1) // normalized on every call
		canonical := "docker.io/" + short           // found as it is
		for _, q := range []struct{ name, image string }{{"canonical", canonical}, {"short", short}, {"id", id}} {
			b.Run(fmt.Sprintf("images=%d/by=%s", n, q.name), func(b *testing.B) {
				s := spec(q.image)
				b.ReportAllocs()
				for b.Loop() {
					resp, err := e.ImageStatus(ctx, s, false)
					if err != nil || resp.Image == nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
