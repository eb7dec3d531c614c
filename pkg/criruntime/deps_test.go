package criruntime_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/pullguard/pullguard/"

// TestDependencies guards the package graph: the CRI runtime sits below
// every pullguard package that uses it, so neither it nor any package of
// the module it imports, directly or not, reaches one of them (or
// k8s.io/kubernetes).
func TestDependencies(t *testing.T) {
	above := []string{
		module + "credtracker",
		module + "imagemanager",
		module + "pkg/guardedpull",
		module + "pkg/criproxy",
		module + "pkg/podworkers",
		module + "cmd",
		"k8s.io/kubernetes",
	}
	seen := map[string]bool{}
	var walk func(path, dir string)
	walk = func(path, dir string) {
		if seen[path] {
			return
		}
		seen[path] = true
		pkg, err := build.ImportDir(dir, 0)
		require.NoError(t, err, path)
		for _, imp := range pkg.Imports {
			for _, banned := range above {
				assert.False(t, imp == banned || strings.HasPrefix(imp, banned+"/"), "%s imports %s", path, imp)
			}
			if rest, ok := strings.CutPrefix(imp, module); ok {
				walk(imp, filepath.Join("..", "..", filepath.FromSlash(rest)))
			}
		}
	}
	walk(module+"pkg/criruntime", ".")
	assert.Contains(t, seen, module+"internal/dirlock", "the walk follows the module's own imports")
}
