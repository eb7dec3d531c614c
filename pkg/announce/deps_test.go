package announce_test

import (
	"go/build"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDependencies guards the layering: the channel depends on the
// credential and keyring packages below it, never on the proxy that reads
// it, the credential providers, the tracker, the command or
// k8s.io/kubernetes.
func TestDependencies(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	require.NoError(t, err)
	for _, imp := range pkg.Imports {
		for _, banned := range []string{
			"k8s.io/kubernetes",
			"github.com/pullguard/pullguard/credtracker",
			"github.com/pullguard/pullguard/pkg/criproxy",
			"github.com/pullguard/pullguard/pkg/credentialprovider",
			"github.com/pullguard/pullguard/cmd",
		} {
			if imp == banned || strings.HasPrefix(imp, banned+"/") {
				t.Errorf("pkg/announce imports %s", imp)
			}
		}
	}
}
