package dirlock_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/dirlock"
)

func TestAcquire(t *testing.T) {
	tests := []struct {
		name       string
		content    string // lock file content before the holder writes its own
		wantHolder string
	}{
		{name: "holder named by pid", wantHolder: "process " + strconv.Itoa(os.Getpid())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := dirlock.Acquire(dir, "lock")
			require.NoError(t, err)

			_, err = dirlock.Acquire(dir, "lock")
			require.ErrorIs(t, err, dirlock.ErrHeld)
			assert.Contains(t, err.Error(), tt.wantHolder)
			assert.Contains(t, err.Error(), dir)

			require.NoError(t, l.Release())
			again, err := dirlock.Acquire(dir, "lock")
			require.NoError(t, err, "a released lock can be taken again")
			require.NoError(t, again.Release())
			require.NoError(t, l.Release(), "releasing twice is harmless")
		})
	}
}

func TestHolderTextIsOnlyDigits(t *testing.T) {
	for i, content := range []string{"", "not a pid\x1b[31m", "-12345", "99999999999999999999999", "pw-secret-value"} {
		t.Run(strconv.Itoa(i), func(t *testing.T) { // the content stays out of the test's temp dir name
			dir := t.TempDir()
			l, err := dirlock.Acquire(dir, "lock")
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Release() })
			require.NoError(t, os.WriteFile(filepath.Join(dir, "lock"), []byte(content), 0o600))

			_, err = dirlock.Acquire(dir, "lock")
			require.ErrorIs(t, err, dirlock.ErrHeld)
			assert.Contains(t, err.Error(), "pid unknown")
			// The lock file's path is in the error, and a temp dir's
			// random name can hold any digits ("...2382312345/001").
			rest := strings.ReplaceAll(err.Error(), dir, "")
			if len(content) > 1 {
				assert.NotContains(t, rest, content[1:])
			}
		})
	}
}

func TestAcquireMissingDirectory(t *testing.T) {
	_, err := dirlock.Acquire(filepath.Join(t.TempDir(), "absent"), "lock")
	require.Error(t, err)
	assert.NotErrorIs(t, err, dirlock.ErrHeld)
}
