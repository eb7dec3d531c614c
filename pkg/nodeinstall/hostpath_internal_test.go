package nodeinstall

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostPath: a node's path resolves under the root whatever its links
// say: absolute targets and ".." stay under it, a loop ends under it.
func TestHostPath(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "srv/k8s"), 0o755))
	for link, target := range map[string]string{
		"etc-abs":  "/srv/k8s",
		"etc-rel":  "srv/k8s",
		"up":       "../../../../srv",
		"loop-a":   "/loop-b",
		"loop-b":   "loop-a",
		"dangling": "/nowhere/file",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(root, link)))
	}
	for _, tc := range []struct{ path, want string }{
		{"/etc-abs/kubelet.conf.d/99-pullguard.conf", "srv/k8s/kubelet.conf.d/99-pullguard.conf"},
		{"/etc-rel/x", "srv/k8s/x"},
		{"/up/k8s", "srv/k8s"},
		{"/../../srv/k8s", "srv/k8s"},
		{"/dangling", "nowhere/file"},
		{"/a/../etc-abs", "srv/k8s"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			assert.Equal(t, filepath.Join(root, tc.want), hostPath(root, tc.path))
		})
	}
	loop := hostPath(root, "/loop-a/x")
	assert.True(t, strings.HasPrefix(loop, root+"/"), "a loop ends under the root: %s", loop)
	assert.Equal(t, "/etc/x", hostPath("/", "/etc/x"), "the node's own root: as written")
}
