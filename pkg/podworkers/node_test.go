package podworkers_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// TestOneNodePerRootDir: a second node on a root directory fails at once,
// naming the holder, and creates nothing under it; after the first
// closes, the root directory can be used again.
func TestOneNodePerRootDir(t *testing.T) {
	settings, err := nodeconfig.ResolveSettings(nil, nodeconfig.Flags{})
	require.NoError(t, err)
	root := t.TempDir()
	cfg := podworkers.Config{RootDir: root, Settings: settings, Logger: ktesting.NewLogger(t, ktesting.NewConfig())}
	first, err := podworkers.Start(context.Background(), cfg)
	require.NoError(t, err)
	entries := func() []string {
		var out []string
		require.NoError(t, filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
			out = append(out, p)
			return err
		}))
		return out
	}
	before := entries()

	_, err = podworkers.Start(context.Background(), cfg)

	require.ErrorIs(t, err, podworkers.ErrRootDirInUse)
	assert.Contains(t, err.Error(), "process "+strconv.Itoa(os.Getpid()))
	assert.Equal(t, before, entries(), "the second node created nothing")
	require.NoError(t, first.Close())
	again, err := podworkers.Start(context.Background(), cfg)
	require.NoError(t, err)
	require.NoError(t, again.Close())
}
