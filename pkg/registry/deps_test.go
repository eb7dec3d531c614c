package registry_test

import (
	"go/build"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDependencies keeps the registry a leaf: the standard library and a
// few well-kept libraries, no other pullguard package (tests of every
// layer use it) and never k8s.io/kubernetes.
func TestDependencies(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	require.NoError(t, err)
	allowed := []string{
		"github.com/google/go-containerregistry/",
		"golang.org/x/crypto/bcrypt",
		"k8s.io/klog/v2",
		"k8s.io/utils/clock",
	}
	for _, imp := range pkg.Imports {
		first, _, _ := strings.Cut(imp, "/")
		if !strings.Contains(first, ".") {
			continue // the standard library
		}
		ok := false
		for _, a := range allowed {
			ok = ok || imp == a || strings.HasPrefix(imp, a)
		}
		assert.True(t, ok, "pkg/registry imports %s", imp)
	}
}
