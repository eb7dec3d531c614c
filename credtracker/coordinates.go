package credtracker

import (
	"encoding/binary"
	"hash/maphash"
)

// The coordinates (namespace, name, uid) of the secrets and service
// accounts that records list are few and shared: a tenant's pull secret
// is listed by every image the tenant pulled with it. They are kept once
// each, in a coordinates arena beside the record arena, and an entry
// refers to them by offset: most of a record's memory would otherwise be
// copies of the same few strings.
//
// A coordinates arena holds triples (namespace, name, uid), each field a uvarint
// length and its bytes. Like the record arena, its bytes never change once
// published: it grows by copying into a larger buffer (growArena), and is
// rebuilt with only the coordinates still listed when the record arena is
// (recordIndex.rebuild).

// coordSet is a coordinates arena with the writer's set of the triples in it,
// so that a triple is written once. Not safe for concurrent use: it is the
// index writer's (guarded by the tracker's writeMu, which every write to
// the index holds: the index has no lock of its own), or a start-up
// worker's own.
type coordSet struct {
	b     []byte   // the coordinates arena
	slots []uint32 // offset+1 of each triple in b, open addressing; 0 is empty
	n     int      // triples in slots
	seed  maphash.Seed
	buf   []byte // the triple being interned, encoded
}

func newCoordSet(seed maphash.Seed, arenaCap int) *coordSet {
	return &coordSet{b: newArena(arenaCap), slots: make([]uint32, 16), seed: seed}
}

// intern returns the offset of the triple (ns, name, uid) in the arena,
// appending it if it is not there.
func (s *coordSet) intern(ns, name, uid string) int {
	b := s.buf[:0]
	b = binary.AppendUvarint(b, uint64(len(ns)))
	b = append(b, ns...)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(uid)))
	b = append(b, uid...)
	s.buf = b
	return s.internEncoded(b)
}

// internEncoded is intern for an encoded triple (not one of s.b's bytes).
func (s *coordSet) internEncoded(t []byte) int {
	i := s.find(t)
	if s.slots[i] != 0 {
		return int(s.slots[i]) - 1
	}
	off := len(s.b)
	s.b = append(growArena(s.b, len(t)), t...)
	s.slots[i] = uint32(off + 1)
	if s.n++; s.n*4 > len(s.slots)*3 {
		s.grow()
	}
	return off
}

// find returns the slot of the triple t: the one holding it, or the empty
// slot where it goes.
func (s *coordSet) find(t []byte) int {
	n := len(s.slots)
	i := home(maphash.Bytes(s.seed, t), n)
	for s.slots[i] != 0 && string(tripleAt(s.b, int(s.slots[i])-1)) != string(t) {
		if i++; i == n {
			i = 0
		}
	}
	return i
}

// grow makes the set's slots a quarter more (not twice as many: the set
// holds the triples no longer listed until the next rebuild, and memory
// grows in small steps, like the arenas').
func (s *coordSet) grow() {
	old := s.slots
	s.slots = make([]uint32, len(old)+len(old)/4)
	for _, v := range old {
		if v != 0 {
			s.slots[s.find(tripleAt(s.b, int(v)-1))] = v
		}
	}
}

// index adds the triples of the arena b (as written by intern, one after
// another, possibly with repeats) to an empty set whose arena b becomes.
func (s *coordSet) index(b []byte) {
	s.b = b
	for o := 0; o < len(b); {
		t := tripleAt(b, o)
		if i := s.find(t); s.slots[i] == 0 { // else a repeat: the first copy is the set's
			s.slots[i] = uint32(o + 1)
			if s.n++; s.n*4 > len(s.slots)*3 {
				s.grow()
			}
		}
		o += len(t)
	}
}

// tripleAt is the encoded triple at off in the coordinates arena b.
func tripleAt(b []byte, off int) []byte {
	o := off
	for range 3 {
		n, k := binary.Uvarint(b[o:])
		o += k + int(n)
	}
	return b[off:o]
}

// coordsAt returns the triple at off in the coordinates arena b.
func coordsAt(b []byte, off int) (ns, name, uid []byte) {
	ns, off = fieldAt(b, off)
	name, off = fieldAt(b, off)
	uid, _ = fieldAt(b, off)
	return ns, name, uid
}

// fieldAt returns the field at off in b and the offset after it.
func fieldAt(b []byte, off int) ([]byte, int) {
	n, k := binary.Uvarint(b[off:])
	end := off + k + int(n)
	return b[off+k : end], end
}
