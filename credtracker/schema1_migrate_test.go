package credtracker_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/textlogger"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
)

func loadSchema1Expected(t *testing.T) schema1Expected {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "schema1", "expected.json"))
	require.NoError(t, err)
	var exp schema1Expected
	require.NoError(t, json.Unmarshal(data, &exp))
	require.NotEmpty(t, exp.Runs)
	require.NotEmpty(t, exp.Requests)
	return exp
}

// assertJSONEqual compares what the tracker returns with what the
// fixture's tracker returned, in the form the fixture keeps it.
func assertJSONEqual(t *testing.T, want, got any, what string) {
	t.Helper()
	w, err := json.Marshal(want)
	require.NoError(t, err)
	g, err := json.Marshal(got)
	require.NoError(t, err)
	assert.JSONEq(t, string(w), string(g), what)
}

// TestSchema1StoreIsMigrated opens a store written by a tracker of schema
// version 1 (testdata/schema1, made by generate.sh with that tracker's
// code) with today's tracker, under every policy: it is migrated, not
// rebuilt; the status, every record and every decision are those that
// tracker had at the same start; and the migrated store passes the whole
// integrity check, read-only and at the next start.
func TestSchema1StoreIsMigrated(t *testing.T) {
	exp := loadSchema1Expected(t)
	for _, run := range exp.Runs {
		t.Run(string(run.Policy), func(t *testing.T) {
			dir := credtracker.CopySchema1(t)
			var logs bytes.Buffer
			clk := clocktesting.NewFakeClock(exp.Clock)
			inv := credtracker.ImageInventoryFunc(func(context.Context) ([]credtracker.Image, error) { return exp.Inventory, nil })
			cfg := credtracker.Config{Dir: dir, Policy: run.Policy, Allowlist: run.Allowlist}
			start := func() credtracker.Enabled {
				tr, err := credtracker.New(context.Background(), cfg, inv, credtracker.WithClock(clk),
					credtracker.WithLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs)))))
				require.NoError(t, err)
				return tr
			}

			tr := start()
			assert.Contains(t, logs.String(), `"Migrated the record store to this pullguard's schema version; every record was kept"`)
			assert.Contains(t, logs.String(), "from=1 to=2")
			assertJSONEqual(t, run.Status, tr.Status(), "status")
			assertJSONEqual(t, run.Records, tr.Records(), "records after the start")
			for i, req := range exp.Requests {
				var creds []credential.Credential
				for _, name := range req.Credentials {
					c := exp.Credentials[name]
					h, err := hex.DecodeString(c.Hash)
					require.NoError(t, err)
					creds = append(creds, credential.Credential{Source: c.Source, Hash: credential.Hash(h)})
				}
				d := tr.Decide(credtracker.Request{Image: req.Image, ImageRef: req.ImageRef, Names: req.Names, PullPolicy: req.PullPolicy, Credentials: credsFunc(creds...)})
				assert.Equal(t, run.Decisions[i], d.Action.String()+"/"+d.Reason.String(), "%s %s with %v", req.Image, req.PullPolicy, req.Credentials)
			}
			assertJSONEqual(t, run.RecordsAfter, tr.Records(), "records after the decisions")
			require.NoError(t, tr.Close())

			// The migrated store passes every check (structure, schema
			// version, seal, generation) read-only, and at the next start,
			// which migrates nothing and recovers nothing.
			recs, st, err := credtracker.ReadRecords(dir)
			require.NoError(t, err)
			assertJSONEqual(t, run.RecordsAfter, recs, "records read from the migrated store")
			assert.Equal(t, run.Status.RecoveryReason, st.RecoveryReason)
			logs.Reset()
			tr = start()
			defer tr.Close()
			assert.NotContains(t, logs.String(), "Migrated")
			assert.NotContains(t, logs.String(), "integrity check")
			assertJSONEqual(t, run.Status, tr.Status(), "status at the next start")
			assertJSONEqual(t, run.RecordsAfter, tr.Records(), "records at the next start")
		})
	}
}

// TestSchema1StoreReadOnly: inspection (pullguard records) does not
// migrate; it says who will, and changes nothing.
func TestSchema1StoreReadOnly(t *testing.T) {
	dir := credtracker.CopySchema1(t)
	before := credtracker.DirFiles(t, dir)
	_, _, err := credtracker.ReadRecords(dir)
	require.ErrorIs(t, err, credtracker.ErrStoreMigrationPending)
	assert.NotErrorIs(t, err, credtracker.ErrStoreTooNew)
	assert.ErrorContains(t, err, "has schema version 1, older than this pullguard's 2: pullguard serve or run migrates it at its next start")
	_, err = credtracker.ReadIntents(dir)
	assert.ErrorIs(t, err, credtracker.ErrStoreMigrationPending)
	assert.Equal(t, before, credtracker.DirFiles(t, dir), "nothing changed")
}
