package credential

import "golang.org/x/crypto/blake2b"

// DeriveKey returns a 32-byte key for purpose, derived from the node's hash
// key (keyed BLAKE2b-256 of a domain-separated purpose string). Other
// node-local secrets, such as the key of the record store's integrity
// seal, are derived with it instead of reusing the hash key itself. A
// different hash key gives unrelated derived keys.
func (h *Hasher) DeriveKey(purpose string) [KeySize]byte {
	d, err := blake2b.New256(h.key[:])
	if err != nil {
		// Unreachable: the key length is checked by NewHasher.
		panic("blake2b: " + err.Error())
	}
	d.Write([]byte("pullguard.derive.v1\x00"))
	d.Write([]byte(purpose))
	var k [KeySize]byte
	d.Sum(k[:0])
	return k
}
