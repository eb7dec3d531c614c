package criproxy

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pullguard/pullguard/pkg/credential"
)

// BenchmarkPodCalls measures what podCalls costs the kubelet's calls for
// two new pods, under podCalls.mu: a Never pod's presence check that
// reports an image absent (hid: its window stays open), and an
// IfNotPresent pod's presence check (hid), the pull that follows it
// (take), the pull's success (proved) and the size look-up right after it
// (proofOf). The pods are new at every op, as at a node's start, so the
// maps stay full and every op makes room. "parallel" runs the ops on
// every P at once (the lock's contention). lost-windows and lost-proofs
// count, per op, the pod's own window or proof gone by its next call.
func BenchmarkPodCalls(b *testing.B) {
	const images = 500 // distinct names: the memo of their keys stays warm
	names := make([]string, images)
	for i := range names {
		names[i] = fmt.Sprintf("reg.example.com/team-%d/app:v1", i)
	}
	cred := credential.Credential{Registry: "reg.example.com", Hash: credential.Hash{1}}
	now := time.Unix(1_800_000_000, 0)
	var pods, lostWindows, lostProofs atomic.Int64
	op := func(p *podCalls) {
		n := pods.Add(1)
		image, pod := names[n%images], fmt.Sprintf("api\x00%d\x00", n)
		p.hid(image, "never"+pod, now, "sha256:1", []string{image})
		p.hid(image, pod, now, "sha256:1", []string{image})
		if ok, _, _ := p.take(image, pod, now); !ok {
			lostWindows.Add(1)
		}
		p.proved(image, pod, pod, "sha256:1", cred)
		if _, _, ok := p.proofOf(image, pod, "sha256:1"); !ok {
			lostProofs.Add(1)
		}
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(lostWindows.Swap(0))/float64(b.N), "lost-windows/op")
		b.ReportMetric(float64(lostProofs.Swap(0))/float64(b.N), "lost-proofs/op")
	}
	fill := func() *podCalls {
		p := newPodCalls(DefaultAnswerWindow, maxWindows)
		for range maxWindows {
			op(p)
		}
		lostWindows.Store(0)
		lostProofs.Store(0)
		return p
	}
	b.Run("serial", func(b *testing.B) {
		p := fill()
		b.ReportAllocs()
		for b.Loop() {
			op(p)
		}
		report(b)
	})
	b.Run("parallel", func(b *testing.B) {
		p := fill()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				op(p)
			}
		})
		report(b)
	})
}
