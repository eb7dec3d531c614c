package credtracker_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/credtracker"
)

const baseImage = "registry.example/preloaded/base:1"

// tamperEnv is a node where tenant A pulled its private image with its
// secret, and a base image was preloaded (no record).
func tamperEnv(t *testing.T) *env {
	e := newEnv(t, credtracker.Config{})
	e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
	e.inv.images = []credtracker.Image{{Ref: refApp, Names: []string{appImage}}, {Ref: refBase, Names: []string{baseImage}}}
	return e
}

func editBolt(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(fn))
	require.NoError(t, db.Close())
}

func TestStoreTamperingIsDetected(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, e *env, store string)
		want   string
	}{
		{
			name:   "emptied file",
			tamper: func(t *testing.T, _ *env, store string) { require.NoError(t, os.Truncate(store, 0)) },
			want:   "the file is empty",
		},
		{
			name:   "deleted file",
			tamper: func(t *testing.T, _ *env, store string) { require.NoError(t, os.Remove(store)) },
			want:   "missing but the node's hash key is not new",
		},
		{
			name:   "truncated to 8 KiB",
			tamper: func(t *testing.T, _ *env, store string) { require.NoError(t, os.Truncate(store, 8<<10)) },
			want:   "truncated?",
		},
		{
			name:   "truncated to 16 KiB",
			tamper: func(t *testing.T, _ *env, store string) { require.NoError(t, os.Truncate(store, 16<<10)) },
			want:   "truncated?",
		},
		{
			name: "missing bucket",
			tamper: func(t *testing.T, _ *env, store string) {
				editBolt(t, store, func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("intents")) })
			},
			want: `bucket "intents" is missing`,
		},
		{
			name: "deleted record",
			tamper: func(t *testing.T, _ *env, store string) {
				editBolt(t, store, func(tx *bolt.Tx) error { return tx.Bucket([]byte("pulled")).Delete([]byte(refApp)) })
			},
			want: "integrity seal does not match",
		},
		{
			name: "record key renamed",
			tamper: func(t *testing.T, _ *env, store string) {
				editBolt(t, store, func(tx *bolt.Tx) error {
					b := tx.Bucket([]byte("pulled"))
					v := append([]byte(nil), b.Get([]byte(refApp))...)
					if err := b.Delete([]byte(refApp)); err != nil {
						return err
					}
					return b.Put([]byte(refOther), v)
				})
			},
			want: "integrity seal does not match",
		},
		{
			name: "added record",
			tamper: func(t *testing.T, _ *env, store string) {
				editBolt(t, store, func(tx *bolt.Tx) error {
					b := tx.Bucket([]byte("pulled"))
					return b.Put([]byte(refBase), append([]byte(nil), b.Get([]byte(refApp))...))
				})
			},
			want: "integrity seal does not match",
		},
		{
			name: "deleted intent",
			tamper: func(t *testing.T, e *env, store string) {
				// An intent left by a pull in flight, then removed.
				e.start()
				require.NoError(t, e.tr.RecordPullIntent(baseImage))
				require.NoError(t, e.tr.Close())
				editBolt(t, store, func(tx *bolt.Tx) error {
					return tx.Bucket([]byte("intents")).Delete([]byte("registry.example/preloaded/base:1"))
				})
			},
			want: "integrity seal does not match",
		},
		{
			name: "seal removed",
			tamper: func(t *testing.T, _ *env, store string) {
				editBolt(t, store, func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Delete([]byte("seal")) })
			},
			want: "the store has no seal",
		},
		{
			name: "store copied from another node",
			tamper: func(t *testing.T, _ *env, store string) {
				other := newEnv(t, credtracker.Config{})
				// The other node pulled the same image with no credentials.
				other.pull(appImage, refApp, nodeCred(other.tr.Hasher(), reg))
				require.NoError(t, other.tr.Close())
				data, err := os.ReadFile(filepath.Join(other.dir, credtracker.StoreFile))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(store, data, 0o600))
			},
			want: "not made with this node's key",
		},
		{
			name: "old backup restored",
			tamper: func(t *testing.T, e *env, store string) {
				backup, err := os.ReadFile(store)
				require.NoError(t, err)
				e.start()
				e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
				require.NoError(t, e.tr.Close())
				require.NoError(t, os.WriteFile(store, backup, 0o600))
			},
			want: "older than the node's",
		},
		{
			name: "generation file deleted",
			tamper: func(t *testing.T, e *env, _ string) {
				require.NoError(t, os.Remove(filepath.Join(e.dir, credtracker.GenerationFile)))
			},
			want: "generation file is missing",
		},
		{
			name: "generation file damaged",
			tamper: func(t *testing.T, e *env, _ string) {
				p := filepath.Join(e.dir, credtracker.GenerationFile)
				data, err := os.ReadFile(p)
				require.NoError(t, err)
				for i := range data {
					data[i] ^= 0x40
				}
				require.NoError(t, os.WriteFile(p, data, 0o600))
			},
			want: "generation file",
		},
		{
			name: "newest bbolt meta page damaged",
			tamper: func(t *testing.T, _ *env, store string) {
				// bbolt falls back to the other meta page, the previous
				// transaction's tree: an older store.
				f, err := os.OpenFile(store, os.O_RDWR, 0)
				require.NoError(t, err)
				defer f.Close()
				var meta [2][8]byte
				_, err = f.ReadAt(meta[0][:], 16+48)
				require.NoError(t, err)
				_, err = f.ReadAt(meta[1][:], int64(os.Getpagesize())+16+48)
				require.NoError(t, err)
				newest := int64(0)
				if binary.LittleEndian.Uint64(meta[1][:]) > binary.LittleEndian.Uint64(meta[0][:]) {
					newest = int64(os.Getpagesize())
				}
				_, err = f.WriteAt([]byte{0xff}, newest+16+20)
				require.NoError(t, err)
			},
			want: "older than the node's",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tamperEnv(t)
			require.NoError(t, e.tr.Close())
			store := filepath.Join(e.dir, credtracker.StoreFile)
			tt.tamper(t, e, store)
			e.start()

			st := e.tr.Status()
			assert.NotZero(t, st.RecoveredAt, "the change was detected")
			assert.Contains(t, st.RecoveryReason, tt.want)
			assert.False(t, st.Degraded)
			// Tenant B's pod without credentials never gets tenant A's
			// image; every present image needs verification again.
			for _, req := range []credtracker.Request{
				{Image: appImage, ImageRef: refApp, Names: []string{appImage}, PullPolicy: corev1.PullNever},
				ifNotPresent(appImage, refApp),
				ifNotPresent(appImage, refApp, e.secretCred(reg, "team-b", "regcred", "uid-b", "bob", "pw-b")),
				ifNotPresent(baseImage, refBase),
			} {
				d := e.tr.Decide(req)
				assert.NotEqual(t, credtracker.UseImage, d.Action, "%s %s", req.Image, req.PullPolicy)
				assert.Equal(t, credtracker.ReasonUnknownOrigin, d.Reason)
			}
			// It keeps serving: a verified pull is trusted again, and the
			// next start finds the new store intact.
			secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
			e.pull(appImage, refApp, secret)
			assert.Equal(t, credtracker.ReasonCredentialMatch, e.tr.Decide(ifNotPresent(appImage, refApp, secret)).Reason)
			e.restart()
			assert.Equal(t, st.RecoveredAt, e.tr.Status().RecoveredAt, "no second recovery")
			assert.Equal(t, credtracker.ReasonCredentialMatch, e.tr.Decide(ifNotPresent(appImage, refApp, secret)).Reason)
		})
	}
}

func TestReadRecordsReportsTampering(t *testing.T) {
	e := tamperEnv(t)
	require.NoError(t, e.tr.Close())
	editBolt(t, filepath.Join(e.dir, credtracker.StoreFile), func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("pulled")).Delete([]byte(refApp))
	})
	_, _, err := credtracker.ReadRecords(e.dir)
	require.Error(t, err)
	assert.ErrorContains(t, err, "integrity seal does not match")
}

func TestStoreLockedBySecondTracker(t *testing.T) {
	e := tamperEnv(t)
	credtracker.ShortenLockTimeout(t, 100*time.Millisecond)
	_, err := credtracker.New(t.Context(), e.cfg, e.inv)
	require.Error(t, err)
	assert.ErrorContains(t, err, "locked by another process")
	assert.ErrorIs(t, err, credtracker.ErrLocked)
	// ReadRecords waits for the lock, then says the same.
	_, _, err = credtracker.ReadRecords(e.dir)
	assert.ErrorIs(t, err, credtracker.ErrLocked)
	// The first tracker is unharmed.
	assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason)
}
