package announce_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/pullguard/pullguard/pkg/announce"
)

// TestWriterOrder shows the order of a writer's operations: the shared
// hash key written, fsynced, linked into place only if absent, its
// directory fsynced; an announcement written and renamed into place, on
// purpose without an fsync (see Writer.put).
func TestWriterOrder(t *testing.T) {
	f := newFixture(t)
	rec := durabletest.Record(t, filepath.Dir(f.dir))
	f.write(t, ecrAnswer(announce.ScopeRegistry, time.Hour))

	assert.Equal(t, [][]string{{
		durabletest.StepCreate, durabletest.StepChmod, durabletest.StepWrite, durabletest.StepSync, durabletest.StepClose,
		durabletest.StepLink, durabletest.StepRemove, durabletest.StepSyncDir,
	}}, rec.Writes(filepath.Join(f.dir, announce.KeyFile)), "the key: %v", rec.Ops())
	names := entries(t, f.dir)
	require.Len(t, names, 1)
	assert.Equal(t, [][]string{{
		durabletest.StepCreate, durabletest.StepChmod, durabletest.StepWrite, durabletest.StepClose, durabletest.StepRename,
	}}, rec.Writes(filepath.Join(f.dir, names[0])), "the announcement: %v", rec.Ops())
}

// TestWriterCrash kills a writer after each of its steps: a Board then
// finds the announcement whole or none at all, refuses nothing, and the
// directory holds nothing but the key, announcements and temporary files
// (which the next writer removes once stale).
func TestWriterCrash(t *testing.T) {
	completed, seen := false, false
	durabletest.Crash(t, durabletest.CrashCase{
		Write: func(dir string) error {
			w, err := announce.NewWriter(filepath.Join(dir, announce.Dir), announce.WithWriterClock(clocktesting.NewFakeClock(time.Now())))
			if err != nil {
				return err
			}
			return w.Write(ecrAnswer(announce.ScopeRegistry, time.Hour))
		},
		Check: func(t *testing.T, dir string, o durabletest.Outcome) {
			f := &fixture{dir: filepath.Join(dir, announce.Dir), clock: clocktesting.NewFakeClock(time.Now()), log: &logBuffer{}}
			_, found := f.board().Source(image(t, ecrA+"/team/app"), token(tokenOne))
			assert.NotContains(t, f.log.text(), "Refusing", "the Board refused a file")
			if !o.Killed {
				completed = true
				assert.True(t, found, "the completed write")
			}
			if found {
				seen = true
			} else {
				assert.False(t, seen, "the announcement was there after an earlier step")
			}
			if o.Steps == 0 {
				return
			}
			files, _ := durabletest.List(t, f.dir)
			assert.Subset(t, append(entries(t, f.dir), announce.KeyFile), files, "nothing but the key, announcements and temporary files")
		},
	})
	assert.True(t, completed)
}
