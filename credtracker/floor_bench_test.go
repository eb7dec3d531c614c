package credtracker

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMemoryFloor is what the machine's memory charges a uniform
// decision, without the decision: one load from a table of the index's
// slot table size, then three adjacent cache lines (an entry's) at the
// offset it holds, in an arena of the index's size at 1 000 and 100 000
// records (about 205 bytes per record, slots included); each access waits
// for the one before, as successive decisions do not (so this is a floor,
// not the decision's memory cost). Compare its ns/op with BenchmarkDecide's
// uniform net-ns/op minus hot1024's.
func BenchmarkMemoryFloor(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		arena := make([]byte, n*180)
		for i := range arena {
			arena[i] = byte(i)
		}
		slots := make([]uint64, n*2*1024/700&^1) // even: an index xor 1 stays in range
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		for i := range slots {
			slots[i] = uint64(rng.IntN(len(arena) - 192))
		}
		order := make([]uint32, benchOrderLen)
		for i := range order {
			order[i] = uint32(rng.IntN(len(slots)))
		}
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			var sink byte
			for i := 0; i < b.N; i++ {
				off := slots[order[i&(benchOrderLen-1)]^uint32(sink&1)]
				sink += arena[off] ^ arena[off+64] ^ arena[off+128]
			}
			benchSink += uint(sink)
		})
	}
}

// BenchmarkMemoryLatency is what one random read costs this machine, by
// the size of the memory it is drawn from: each read of one line waits
// for the one before. Where the curve turns (between 8 and 16 MB on this
// VM, whose last-level cache is shared) is why the decision reads 7 MB of
// cells rather than the 18 MB arena at 100 000 records (cells.go).
func BenchmarkMemoryLatency(b *testing.B) {
	for _, mb := range []int{1, 4, 8, 16, 32, 64} {
		buf := make([]uint64, mb<<20/8)
		for i := range buf {
			buf[i] = uint64(i)
		}
		rng := rand.New(rand.NewPCG(7, uint64(mb)))
		order := make([]uint32, benchOrderLen)
		for i := range order {
			order[i] = uint32(rng.IntN(len(buf)/8)) * 8 // a line's first word
		}
		b.Run(fmt.Sprintf("MB=%d", mb), func(b *testing.B) {
			var sink uint64
			for i := 0; i < b.N; i++ {
				sink += buf[order[i&(benchOrderLen-1)]^uint32(sink&1)]
			}
			benchSink += uint(sink)
		})
	}
}

// BenchmarkDecideParts splits the decision at 100 000 records into its
// steps, each timed with the steps before it and the harness (ns/op
// includes them all; subtract the row above): the harness (building the
// request, as BenchmarkDecide does), parsing the image's name, looking up
// the record's entry, and the whole decision. Uniform against hot1024
// shows which step pays the memory misses.
func BenchmarkDecideParts(b *testing.B) {
	const n = 100_000
	tr, _ := openBench(b, n)
	g := newReqGen(tr.hasher)
	steps := []struct {
		name string
		step func(req Request) uint
	}{
		{"harness", touchRequest},
		{"parse", func(req Request) uint {
			repo, _ := RepositoryName(req.Image)
			return uint(len(repo))
		}},
		{"lookupOnly", func(req Request) uint {
			// The generator's names end in ":v1": the repository, unparsed.
			rv, _ := tr.images.loadRepository(req.ImageRef, req.Image[:len(req.Image)-3])
			return uint(rv.first)
		}},
		{"lookup", func(req Request) uint {
			repo, _ := RepositoryName(req.Image)
			rv, _ := tr.images.loadRepository(req.ImageRef, repo)
			return uint(rv.first)
		}},
		{"decide", func(req Request) uint { return uint(tr.Decide(req).Action) }},
	}
	for _, wl := range []struct {
		name  string
		order func(int) []uint32
	}{{"uniform", uniformOrder}, {"hot1024", hotOrder}} {
		order := wl.order(n)
		mask := uint32(len(order) - 1)
		for _, st := range steps {
			b.Run(fmt.Sprintf("workload=%s/step=%s", wl.name, st.name), func(b *testing.B) {
				var s uint
				for i := 0; i < b.N; i++ {
					s += st.step(g.request(int(order[uint32(i)&mask])))
				}
				benchSink += s
			})
		}
	}
}
