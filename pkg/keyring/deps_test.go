package keyring_test

import (
	"go/build"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDependencies guards the layering: the keyring depends on the
// credential leaf package and well-kept libraries, never on
// k8s.io/kubernetes or on the packages that use it.
func TestDependencies(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	require.NoError(t, err)
	for _, imp := range pkg.Imports {
		for _, banned := range []string{
			"k8s.io/kubernetes",
			"github.com/pullguard/pullguard/credtracker",
			"github.com/pullguard/pullguard/imagemanager",
			"github.com/pullguard/pullguard/pkg/credentialprovider",
			"github.com/pullguard/pullguard/pkg/podworkers",
			"github.com/pullguard/pullguard/cmd",
		} {
			if imp == banned || strings.HasPrefix(imp, banned+"/") {
				t.Errorf("pkg/keyring imports %s", imp)
			}
		}
	}
}
