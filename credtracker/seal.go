package credtracker

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/crypto/blake2b"

	"github.com/pullguard/pullguard/pkg/credential"
)

// The store seals its own contents. Every entry of every bucket (but the
// seal itself) has a keyed MAC, BLAKE2b-256 of (bucket, key, value) under
// a key derived from the node's hash key; the seal holds the XOR of all
// of them, their count and the store's generation, and a MAC over those.
// A write changes the seal in O(1): the MACs of the entries it replaces
// are XORed out and those of the new ones in. Start-up recomputes the XOR
// over the whole file and compares. Since each MAC is unpredictable
// without the key, any change to the set of entries (one added, removed or
// altered, a key renamed, a bucket lost) changes the XOR; a store sealed
// on another node fails because its key differs; an older store of this
// node is caught by its generation, which is kept also outside the store,
// in the generation file (genfile.go).
const sealPurpose = "credtracker.store-seal.v1"

var keySeal = []byte("seal")

const (
	sealLen    = 8 + 8 + blake2b.Size256 + blake2b.Size256
	sealDomain = "pullguard.credtracker.seal.v1\x00"

	// One byte per bucket, first in an entry's MAC input.
	idPulled  = 'p'
	idIntents = 'i'
	idMeta    = 'm'
)

type digest [blake2b.Size256]byte

func (d *digest) xor(o digest) { subtle.XORBytes(d[:], d[:], o[:]) }

// sealer computes entry MACs and seals under one node's key.
type sealer struct{ key [credential.KeySize]byte }

func newSealer(h *credential.Hasher) *sealer { return &sealer{key: h.DeriveKey(sealPurpose)} }

func (s *sealer) newMAC() hash.Hash {
	m, err := blake2b.New256(s.key[:])
	if err != nil {
		panic("blake2b: " + err.Error()) // unreachable: the key is 32 bytes
	}
	return m
}

// entryMAC computes the MACs of entries, with buffers allocated once so
// that each MAC allocates nothing. It is not safe for concurrent use.
type entryMAC struct {
	m   hash.Hash
	hdr [1 + binary.MaxVarintLen64]byte
	out [blake2b.Size256]byte
}

func (s *sealer) newEntryMAC() *entryMAC { return &entryMAC{m: s.newMAC()} }

// sum is the MAC of one entry: bucket id | uvarint len(key) | key | value.
func (e *entryMAC) sum(bucket byte, k, v []byte) digest {
	e.m.Reset()
	e.hdr[0] = bucket
	n := binary.PutUvarint(e.hdr[1:], uint64(len(k)))
	e.m.Write(e.hdr[:1+n])
	e.m.Write(k)
	e.m.Write(v)
	return digest(e.m.Sum(e.out[:0]))
}

func bucketID(name []byte) byte {
	switch string(name) {
	case string(bucketPulled):
		return idPulled
	case string(bucketIntents):
		return idIntents
	}
	return idMeta
}

// seal is the store's integrity state.
type seal struct {
	gen, count uint64
	sum        digest
}

func (s *sealer) tag(st seal) (t digest) {
	m := s.newMAC()
	m.Write([]byte(sealDomain))
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], st.gen)
	binary.LittleEndian.PutUint64(b[8:], st.count)
	m.Write(b[:])
	m.Write(st.sum[:])
	m.Sum(t[:0])
	return t
}

func (s *sealer) encode(st seal) []byte {
	out := make([]byte, 0, sealLen)
	out = binary.LittleEndian.AppendUint64(out, st.gen)
	out = binary.LittleEndian.AppendUint64(out, st.count)
	out = append(out, st.sum[:]...)
	t := s.tag(st)
	return append(out, t[:]...)
}

var errSealMismatch = errors.New("integrity seal does not match")

func (s *sealer) decode(b []byte) (seal, error) {
	if len(b) != sealLen {
		return seal{}, fmt.Errorf("%w: %d bytes, want %d", errSealMismatch, len(b), sealLen)
	}
	st := seal{gen: binary.LittleEndian.Uint64(b), count: binary.LittleEndian.Uint64(b[8:])}
	copy(st.sum[:], b[16:])
	t := s.tag(st)
	if subtle.ConstantTimeCompare(t[:], b[16+len(st.sum):]) != 1 {
		return seal{}, fmt.Errorf("%w: the seal was not made with this node's key", errSealMismatch)
	}
	return st, nil
}

// verify recomputes the seal of the entries of f, using every core, and
// compares it with the stored one. It returns the stored seal.
func (s *sealer) verify(f *boltFile, workers int) (seal, error) {
	var stored []byte
	var got seal
	for name, entries := range f.buckets {
		id := bucketID([]byte(name))
		if id == idMeta {
			for i, e := range entries {
				if string(e.key) == string(keySeal) {
					stored = e.value
					entries = append(entries[:i:i], entries[i+1:]...)
					break
				}
			}
		}
		got.count += uint64(len(entries))
		sums := make([]digest, max(1, workers))
		done := make(chan struct{}, len(sums))
		for w := range sums {
			go func() {
				m := s.newEntryMAC()
				for i := w; i < len(entries); i += len(sums) {
					sums[w].xor(m.sum(id, entries[i].key, entries[i].value))
				}
				done <- struct{}{}
			}()
		}
		for range sums {
			<-done
		}
		for _, d := range sums {
			got.sum.xor(d)
		}
	}
	names := make([]string, 0, len(f.buckets))
	for name := range f.buckets {
		names = append(names, name)
	}
	return s.check(names, stored, got)
}

// check compares got, the XOR and count of the MACs of every entry of a
// store's buckets named names (every entry but the seal), with stored, the
// seal's value (nil when there is none). It returns the stored seal.
func (s *sealer) check(names []string, stored []byte, got seal) (seal, error) {
	for _, b := range [][]byte{bucketPulled, bucketIntents, bucketMeta} {
		if !slices.Contains(names, string(b)) {
			return seal{}, fmt.Errorf("%w: bucket %q is missing", errSealMismatch, b)
		}
	}
	if len(names) != 3 {
		return seal{}, fmt.Errorf("%w: %d buckets, want 3", errSealMismatch, len(names))
	}
	if stored == nil {
		return seal{}, fmt.Errorf("%w: the store has no seal", errSealMismatch)
	}
	want, err := s.decode(stored)
	if err != nil {
		return seal{}, err
	}
	if got.count != want.count {
		return seal{}, fmt.Errorf("%w: %d entries, the seal says %d", errSealMismatch, got.count, want.count)
	}
	if got.sum != want.sum {
		return seal{}, fmt.Errorf("%w: an entry was added, removed or changed", errSealMismatch)
	}
	return want, nil
}

// sealedTx changes entries in a transaction and the seal with them: the
// MAC of the entry a change replaces is XORed out of the seal, the MAC of
// the new entry in. O(1) per change, whatever the number of records.
type sealedTx struct {
	tx   *bolt.Tx
	mac  *entryMAC
	next *seal
}

func (w *sealedTx) hashOf(bucket, k, v []byte) digest {
	return w.mac.sum(bucketID(bucket), k, v)
}

func (w *sealedTx) forget(b *bolt.Bucket, bucket, k []byte) {
	if old := b.Get(k); old != nil {
		w.next.sum.xor(w.hashOf(bucket, k, old))
		w.next.count--
	}
}

func (w *sealedTx) put(bucket, k, v []byte) error {
	if string(bucket) == string(bucketMeta) && string(k) == string(keySeal) {
		return errors.New("the seal is not an entry")
	}
	b := w.tx.Bucket(bucket)
	w.forget(b, bucket, k)
	if err := b.Put(k, v); err != nil {
		return err
	}
	w.next.sum.xor(w.hashOf(bucket, k, v))
	w.next.count++
	return nil
}

func (w *sealedTx) del(bucket, k []byte) error {
	b := w.tx.Bucket(bucket)
	w.forget(b, bucket, k)
	return b.Delete(k)
}
