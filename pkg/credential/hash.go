package credential

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/blake2b"
)

// KeySize is the length in bytes of a node-local hash key.
const KeySize = 32

// HashSize is the length in bytes of a credential hash.
const HashSize = blake2b.Size256

// Hash is the keyed BLAKE2b-256 digest of one credential as presented to one
// registry. It is comparable, so it can key a map. Its String method prints
// only a short prefix, enough to tell hashes apart in a listing.
type Hash [HashSize]byte

// IsZero reports whether h is the zero hash (no credential).
func (h Hash) IsZero() bool { return h == Hash{} }

// String returns the first 12 hex digits of the hash.
func (h Hash) String() string { return hex.EncodeToString(h[:6]) }

// Equal compares two hashes in constant time.
func (h Hash) Equal(o Hash) bool { return subtle.ConstantTimeCompare(h[:], o[:]) == 1 }

// hashDomain separates pullguard credential hashes from any other use of
// the same key; bump its version if the encoding below ever changes.
// authDomain is HashAuth's: a hash bound to no registry never equals one
// bound to a registry, whatever the key.
const (
	hashDomain = "pullguard.credential.v1"
	authDomain = "pullguard.credential.anyregistry.v1"
)

// Hasher computes keyed hashes of credentials. It is safe for concurrent use.
// Two Hashers made from the same key give the same hashes; a different key
// gives unrelated hashes, so a lost key only means every credential is
// verified with its registry once more.
type Hasher struct {
	key [KeySize]byte
}

// ErrInvalidKey is returned for a hash key of the wrong length.
var ErrInvalidKey = errors.New("invalid credential hash key")

// NewHasher returns a Hasher for a KeySize-byte key.
func NewHasher(key []byte) (*Hasher, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("%w: want %d bytes, got %d", ErrInvalidKey, KeySize, len(key))
	}
	h := &Hasher{}
	copy(h.key[:], key)
	return h, nil
}

// NewRandomHasher returns a Hasher with a random key of its own: for a
// process that records nothing (the gate off), whose hashes need to match
// only each other while it runs.
func NewRandomHasher() (*Hasher, error) {
	h := &Hasher{}
	if _, err := rand.Read(h.key[:]); err != nil {
		return nil, fmt.Errorf("failed to make a hash key: %w", err)
	}
	return h, nil
}

// Hash returns the keyed hash of auth as presented to registry (a host with
// an optional port, such as "registry.example:5000"). The registry is
// normalized (lower case, Docker Hub aliases folded into "docker.io") and
// every credential field is included, each length-prefixed so that no two
// different credentials share an encoding.
func (h *Hasher) Hash(registry string, auth AuthConfig) Hash {
	return h.sum(hashDomain, NormalizeRegistry(registry), auth)
}

// HashAuth returns the keyed hash of auth bound to no registry, with every
// credential field included as in Hash. It is for a credential whose
// registries are given beside it as image patterns (a credential
// provider's answer, announced by `pullguard credential-provider`): the
// patterns say where it counts, and a glob cannot name one registry to
// hash with. It never equals a Hash of the same credential.
func (h *Hasher) HashAuth(auth AuthConfig) Hash {
	return h.sum(authDomain, "", auth)
}

func (h *Hasher) sum(domain, registry string, auth AuthConfig) Hash {
	d, err := blake2b.New256(h.key[:])
	if err != nil {
		// Unreachable: the key length is checked by NewHasher.
		panic(fmt.Sprintf("blake2b: %v", err))
	}
	var buf [binary.MaxVarintLen64]byte
	for _, field := range [...]string{
		domain,
		registry,
		auth.Username,
		auth.Password,
		auth.Auth,
		auth.IdentityToken,
		auth.RegistryToken,
	} {
		n := binary.PutUvarint(buf[:], uint64(len(field)))
		_, _ = d.Write(buf[:n])
		_, _ = d.Write([]byte(field))
	}
	var out Hash
	d.Sum(out[:0])
	return out
}

// NormalizeRegistry lower-cases a registry host and folds Docker Hub's
// aliases into "docker.io", the name Kubernetes uses for it.
func NormalizeRegistry(registry string) string {
	r := strings.ToLower(registry)
	switch r {
	case "", "index.docker.io", "registry-1.docker.io":
		return "docker.io"
	}
	return r
}
