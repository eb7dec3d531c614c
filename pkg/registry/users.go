package registry

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// verifiedCacheSize bounds the cache of recently verified credentials.
const verifiedCacheSize = 4096

// userStore checks Basic credentials. It holds bcrypt hashes only.
//
// A bcrypt comparison costs milliseconds by design, and registry clients
// send credentials with every request, so credentials that passed bcrypt
// are remembered under an HMAC-SHA256 of user and password keyed by a
// random per-process key: a later request with the same pair skips bcrypt,
// and nothing in memory lets anyone recover or test a password without
// that key. Failed attempts are never cached; they always pay bcrypt.
type userStore struct {
	hashes map[string][]byte // user -> bcrypt hash; immutable after newUserStore
	dummy  []byte            // a hash of a random password at the configured cost

	key      [32]byte
	mu       sync.RWMutex
	verified map[[sha256.Size]byte]string // HMAC(user, password) -> user
}

func newUserStore(users []User, cost int) (*userStore, error) {
	s := &userStore{
		hashes:   make(map[string][]byte, len(users)+1),
		verified: make(map[[sha256.Size]byte]string),
	}
	if _, err := rand.Read(s.key[:]); err != nil {
		return nil, fmt.Errorf("failed to make the credential cache key: %w", err)
	}
	for _, u := range users {
		if u.PasswordHash != "" {
			if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
				return nil, fmt.Errorf("%w: user %q: password hash is not a bcrypt hash: %w", ErrInvalidConfig, u.Name, err)
			}
			s.hashes[u.Name] = []byte(u.PasswordHash)
			continue
		}
		h, err := bcrypt.GenerateFromPassword([]byte(u.Password), cost)
		if err != nil {
			return nil, fmt.Errorf("%w: user %q: failed to hash the password: %w", ErrInvalidConfig, u.Name, err)
		}
		s.hashes[u.Name] = h
	}
	var err error
	if s.dummy, err = bcrypt.GenerateFromPassword([]byte(rand.Text()), cost); err != nil {
		return nil, fmt.Errorf("failed to hash a dummy password: %w", err)
	}
	return s, nil
}

// addRandom adds a user whose password is a random secret made by the
// caller; used for the built-in administrator before the store is shared.
// A random secret of 128 bits or more gains nothing from a high bcrypt
// cost, so the minimum is used.
func (s *userStore) addRandom(name, password string) error {
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		return fmt.Errorf("failed to hash the password of %q: %w", name, err)
	}
	s.hashes[name] = h
	return nil
}

// verify reports whether password is user's password.
func (s *userStore) verify(user, password string) bool {
	hash, ok := s.hashes[user]
	if !ok {
		// Spend the same time as for a known user, so that response times
		// do not tell which user names exist.
		_ = bcrypt.CompareHashAndPassword(s.dummy, []byte(password))
		return false
	}
	mac := s.mac(user, password)
	s.mu.RLock()
	cached, hit := s.verified[mac]
	s.mu.RUnlock()
	if hit && subtle.ConstantTimeCompare([]byte(cached), []byte(user)) == 1 {
		return true
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil {
		return false
	}
	s.mu.Lock()
	if len(s.verified) >= verifiedCacheSize {
		clear(s.verified)
	}
	s.verified[mac] = user
	s.mu.Unlock()
	return true
}

func (s *userStore) mac(user, password string) [sha256.Size]byte {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(password))
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}
