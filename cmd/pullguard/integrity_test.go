package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// TestTamperedStoreThroughTheBinary: records.db changed between two runs
// (a record deleted, a store from an older run put back) is detected at
// start-up, the node keeps serving, tenant B's Never pod is still refused,
// and `pullguard records` says what happened.
func TestTamperedStoreThroughTheBinary(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, store string, backup []byte)
		want   string
	}{
		{
			name: "every record deleted",
			tamper: func(t *testing.T, store string, _ []byte) {
				db, err := bolt.Open(store, 0o600, nil)
				require.NoError(t, err)
				require.NoError(t, db.Update(func(tx *bolt.Tx) error {
					if err := tx.DeleteBucket([]byte("pulled")); err != nil {
						return err
					}
					_, err := tx.CreateBucket([]byte("pulled"))
					return err
				}))
				require.NoError(t, db.Close())
			},
			want: "integrity seal does not match",
		},
		{
			name: "the store of an earlier run put back",
			tamper: func(t *testing.T, store string, backup []byte) {
				require.NoError(t, os.WriteFile(store, backup, 0o600))
			},
			want: "older than the node's",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			root := filepath.Join(w.dir, "state")
			store := filepath.Join(root, "credtracker", "records.db")
			// A first run: its store is the "backup".
			res := pullguard(t, "run", "-f", w.manifest("restart.yaml"), "--root-dir", root, "-o", "json")
			require.Equal(t, 0, res.code, res.stderr)
			backup, err := os.ReadFile(store)
			require.NoError(t, err)
			res = pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root, "-o", "json")
			require.Equal(t, 0, res.code, res.stderr)

			tt.tamper(t, store, backup)
			w.reg.Reset()
			res = pullguard(t, "run", "-f", w.manifest("restart.yaml"), "--root-dir", root, "-o", "json")
			require.Equal(t, 0, res.code, res.stderr)
			assert.Contains(t, res.stderr, "integrity check")
			doc := decodeRun(t, res.stdout)
			require.Len(t, doc.Results, 2)
			assert.Equal(t, "", doc.Results[0].Error, "tenant A verifies with the registry and runs")
			assert.True(t, doc.Results[0].Pulled, "the image's origin is unknown: tenant A verifies")
			assert.Equal(t, "ErrImageNeverPull", doc.Results[1].Error, "tenant B's Never pod is refused")
			assert.NotEmpty(t, w.reg.Requests())

			res = pullguard(t, "records", "--root-dir", root, "-o", "json")
			require.Equal(t, 0, res.code, res.stderr)
			var recs struct {
				Status struct {
					RecoveryReason string `json:"recoveryReason"`
				} `json:"status"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &recs), res.stdout)
			assert.Contains(t, recs.Status.RecoveryReason, tt.want)
		})
	}
}
