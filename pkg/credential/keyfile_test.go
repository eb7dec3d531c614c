package credential_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/pullguard/pullguard/pkg/credential"
)

func loadOrCreateHasher(path string) (*credential.Hasher, error) {
	h, _, err := credential.LoadOrCreateHasher(path)
	return h, err
}

// keyFileCases are the ways a hash key is created: the tracker's (a new
// key, or one replacing a key of the wrong size) and the announcements'
// (shared by processes that may create it at once).
var keyFileCases = []struct {
	name string
	// invalid, if not empty, is at the path before.
	invalid string
	load    func(path string) (*credential.Hasher, error)
	// want is the steps of the key's write.
	want []string
}{{
	name: "LoadOrCreateHasher creates a key",
	load: loadOrCreateHasher,
	want: durabletest.Durable,
}, {
	name:    "LoadOrCreateHasher replaces a key of the wrong size",
	invalid: "short",
	load:    loadOrCreateHasher,
	want:    durabletest.Durable,
}, {
	name: "LoadOrCreateSharedHasher creates a key",
	load: credential.LoadOrCreateSharedHasher,
	want: []string{durabletest.StepCreate, durabletest.StepChmod, durabletest.StepWrite, durabletest.StepSync, durabletest.StepClose, durabletest.StepLink, durabletest.StepRemove, durabletest.StepSyncDir},
}}

// TestKeyFileIsDurable shows the order of a new key's write: written,
// fsynced, renamed (or linked) into place, its directory fsynced.
func TestKeyFileIsDurable(t *testing.T) {
	for _, tc := range keyFileCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "hashkey")
			if tc.invalid != "" {
				require.NoError(t, os.WriteFile(path, []byte(tc.invalid), 0o600))
			}
			rec := durabletest.Record(t, dir)
			_, err := tc.load(path)
			require.NoError(t, err)
			assert.Equal(t, [][]string{tc.want}, rec.Writes(path), "operations: %v", rec.Ops())
		})
	}
}

// TestKeyFileCrash kills the key's creation after each step: the next
// start finds the old file or a whole new key, and uses it (or, before the
// rename, makes one), never a short key and never a temporary file.
func TestKeyFileCrash(t *testing.T) {
	for _, tc := range keyFileCases {
		t.Run(tc.name, func(t *testing.T) {
			durabletest.Crash(t, durabletest.CrashCase{
				Setup: func(t *testing.T, dir string) {
					if tc.invalid != "" {
						require.NoError(t, os.WriteFile(filepath.Join(dir, "hashkey"), []byte(tc.invalid), 0o600))
					}
				},
				Write: func(dir string) error {
					_, err := tc.load(filepath.Join(dir, "hashkey"))
					return err
				},
				Check: func(t *testing.T, dir string, o durabletest.Outcome) {
					path := filepath.Join(dir, "hashkey")
					key, err := os.ReadFile(path)
					if err == nil {
						if string(key) != tc.invalid {
							assert.Len(t, key, credential.KeySize, "the key file is the old one, whole, or absent")
						}
					} else {
						require.ErrorIs(t, err, os.ErrNotExist)
						assert.True(t, o.Killed, "the completed creation left no key")
					}
					h, err := tc.load(path)
					require.NoError(t, err, "the next start")
					if len(key) == credential.KeySize {
						want, err := credential.NewHasher(key)
						require.NoError(t, err)
						assert.Equal(t, want.HashAuth(credential.AuthConfig{Username: "u", Password: "p"}), h.HashAuth(credential.AuthConfig{Username: "u", Password: "p"}), "the next start uses the key found")
					}
					files, _ := durabletest.List(t, dir)
					assert.Subset(t, []string{"hashkey", "hashkey.invalid"}, files, "nothing but the key, the invalid one and temporary files")
				},
			})
		})
	}
}
