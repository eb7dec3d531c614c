package criproxy_test

import (
	"go/build"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDependencies guards the package graph: the proxy is a sibling of the
// image manager, deciding with the tracker (one copy of the rules), and
// never imports the image manager, the pod workers, the command or
// k8s.io/kubernetes.
func TestDependencies(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	require.NoError(t, err)
	assert.Contains(t, pkg.Imports, "github.com/pullguard/pullguard/credtracker")
	for _, imp := range pkg.Imports {
		for _, banned := range []string{
			"k8s.io/kubernetes",
			"github.com/pullguard/pullguard/imagemanager",
			"github.com/pullguard/pullguard/pkg/podworkers",
			"github.com/pullguard/pullguard/cmd",
		} {
			if imp == banned || strings.HasPrefix(imp, banned+"/") {
				t.Errorf("pkg/criproxy imports %s", imp)
			}
		}
	}
}
