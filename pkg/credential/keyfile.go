package credential

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pullguard/pullguard/internal/durable"
)

// LoadOrCreateHasher reads the hash key at path, or creates it with fresh
// random bytes when it does not exist (mode 0600, written durably by
// internal/durable: fsynced, renamed into place, its directory fsynced).
// created reports whether a new key was made, which means every recorded
// credential hash is now unknown and will be verified once more.
//
// A key file of the wrong size is not trusted: it is moved aside to
// path+".invalid" and a new key is created, which is the safe direction
// (credentials are verified again, never granted).
func LoadOrCreateHasher(path string) (h *Hasher, created bool, err error) {
	key, err := os.ReadFile(path)
	switch {
	case err == nil && len(key) == KeySize:
		if fi, statErr := os.Stat(path); statErr == nil && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(path, 0o600); err != nil {
				return nil, false, fmt.Errorf("failed to restrict permissions of hash key %q: %w", path, err)
			}
		}
		h, err := NewHasher(key)
		return h, false, err
	case err == nil:
		if err := os.Rename(path, path+".invalid"); err != nil {
			return nil, false, fmt.Errorf("failed to move aside invalid hash key %q: %w", path, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("failed to read hash key %q: %w", path, err)
	}

	key = make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, false, fmt.Errorf("failed to generate hash key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("failed to write hash key %q: %w", path, err)
	}
	if err := durable.WriteFile(path, key, 0o600); err != nil {
		return nil, false, fmt.Errorf("failed to write hash key %q: %w", path, err)
	}
	h, err = NewHasher(key)
	return h, true, err
}

// LoadOrCreateSharedHasher reads the hash key at path, or creates it when
// it does not exist, for a key that several processes may create at the
// same moment (each run of `pullguard credential-provider` announces with
// the key beside its announcements). A new key is written to a temporary
// file (mode 0600, fsynced) and linked into place only if path still does
// not exist (durable.Exclusive, which fsyncs the directory too), so every
// process ends up with the one key that won; the others' are discarded. Unlike LoadOrCreateHasher, a key of the wrong
// size is an error and is left alone: it is not this process's to
// replace while others may be using it.
func LoadOrCreateSharedHasher(path string) (*Hasher, error) {
	for attempt := 0; ; attempt++ {
		key, err := os.ReadFile(path)
		switch {
		case err == nil:
			h, err := NewHasher(key)
			if err != nil {
				return nil, fmt.Errorf("failed to read hash key %q: %w", path, err)
			}
			return h, nil
		case !errors.Is(err, fs.ErrNotExist) || attempt > 0:
			return nil, fmt.Errorf("failed to read hash key %q: %w", path, err)
		}
		if err := linkNewKey(path); err != nil {
			return nil, fmt.Errorf("failed to create hash key %q: %w", path, err)
		}
	}
}

// linkNewKey writes a new random key durably at path unless something is
// there already (then that one stands).
func linkNewKey(path string) error {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := durable.WriteFile(path, key, 0o600, durable.Exclusive()); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}
