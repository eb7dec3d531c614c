package nodeinstall_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// TestInstallStaysUnderHostRoot: the node's symbolic links are the node's.
// An absolute link under --host-root (/etc/kubernetes -> /srv/k8s, the
// flags file -> /etc/default/kubelet.real) is resolved under the host
// root, as the node resolves it, never in the file system install runs
// in: install and uninstall write nothing outside the host root, write
// through the links rather than replacing them, and uninstall gives the
// tree back byte for byte.
func TestInstallStaysUnderHostRoot(t *testing.T) {
	root := node(t, "kubeadm")
	// outside is a directory of install's own file system; on the node,
	// the same path is under the host root.
	outside := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, outside), 0o755))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "etc/kubernetes")))
	flags := filepath.Join(root, "etc/default/kubelet")
	data, err := os.ReadFile(flags)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(flags+".real", data, 0o644))
	require.NoError(t, os.Remove(flags))
	require.NoError(t, os.Symlink("/etc/default/kubelet.real", flags))
	before := durabletest.Tree(t, root)

	o := nodeinstall.Options{Root: root, KubeletVersion: version("v1.33.4")}
	p, err := nodeinstall.PlanInstall(o)
	require.NoError(t, err)
	_, err = nodeinstall.Install(o, p)
	require.NoError(t, err)

	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, entries, "install wrote outside the host root")
	assert.FileExists(t, filepath.Join(root, outside, "kubelet.conf.d/99-pullguard.conf"), "the drop-in, where the node's /etc/kubernetes leads")
	fi, err := os.Lstat(flags)
	require.NoError(t, err)
	assert.Equal(t, os.ModeSymlink, fi.Mode()&os.ModeSymlink, "the flags file's link is kept")
	real, err := os.ReadFile(flags + ".real")
	require.NoError(t, err)
	assert.Contains(t, string(real), "--config-dir=/etc/kubernetes/kubelet.conf.d", "written through the link")

	u, err := nodeinstall.PlanUninstall(o, false)
	require.NoError(t, err)
	require.False(t, u.Kept())
	require.NoError(t, nodeinstall.Uninstall(o, u))
	entries, err = os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, entries, "uninstall wrote outside the host root")
	assert.Equal(t, before, durabletest.Tree(t, root), "the tree after uninstall")
}

// TestReinstallAfterARewrite: kubeadm upgrade rewrites the kubelet's
// config.yaml after install; install again merges into the new file, and
// uninstall then gives back the new file, as it was before that install,
// not the one from before the first.
func TestReinstallAfterARewrite(t *testing.T) {
	root := node(t, "kubeadm")
	o := nodeinstall.Options{Root: root, KubeletVersion: version("v1.30.1")}
	install := func() {
		t.Helper()
		p, err := nodeinstall.PlanInstall(o)
		require.NoError(t, err)
		_, err = nodeinstall.Install(o, p)
		require.NoError(t, err)
	}
	install()
	config := filepath.Join(root, "var/lib/kubelet/config.yaml")
	original, err := os.ReadFile("testdata/kubeadm/var/lib/kubelet/config.yaml")
	require.NoError(t, err)
	upgraded := []byte(strings.Replace(string(original), "maxPods: 200", "maxPods: 250", 1))
	require.NotEqual(t, original, upgraded)
	require.NoError(t, os.WriteFile(config, upgraded, 0o644))
	install()

	u, err := nodeinstall.PlanUninstall(o, false)
	require.NoError(t, err)
	require.False(t, u.Kept())
	require.NoError(t, nodeinstall.Uninstall(o, u))
	got, err := os.ReadFile(config)
	require.NoError(t, err)
	assert.Equal(t, string(upgraded), string(got), "config.yaml as the upgrade left it")
}

// TestInstallFailingHalfWayGivesBack: a write that fails after others
// succeeded (here serve's drop-in, whose directory became a file after
// the plan) leaves no half install: the kubelet's files install had
// already written are given back, byte for byte, with no manifest and
// no directory of install's left.
func TestInstallFailingHalfWayGivesBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		// again installs once before, so that a manifest is there.
		again bool
	}{{name: "first install"}, {name: "second install, after kubeadm rewrote config.yaml and serve's drop-in went", again: true}} {
		t.Run(tc.name, func(t *testing.T) {
			root := node(t, "kubeadm")
			o := nodeinstall.Options{Root: root, KubeletVersion: version("v1.30.1")}
			if tc.again {
				p, err := nodeinstall.PlanInstall(o)
				require.NoError(t, err)
				_, err = nodeinstall.Install(o, p)
				require.NoError(t, err)
				original, err := os.ReadFile("testdata/kubeadm/var/lib/kubelet/config.yaml")
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(root, "var/lib/kubelet/config.yaml"), original, 0o644))
				require.NoError(t, os.Remove(filepath.Join(root, nodeinstall.ServeDropIn)))
			}
			blocker := filepath.Join(root, filepath.Dir(nodeinstall.ServeDropIn))
			require.NoError(t, os.RemoveAll(blocker))
			p, err := nodeinstall.PlanInstall(o)
			require.NoError(t, err)
			require.True(t, p.Changed())
			require.NoError(t, os.MkdirAll(filepath.Dir(blocker), 0o755))
			require.NoError(t, os.WriteFile(blocker, []byte("in the way\n"), 0o644))
			before := durabletest.Tree(t, root)

			_, err = nodeinstall.Install(o, p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), nodeinstall.ServeDropIn)
			assert.Equal(t, before, durabletest.Tree(t, root), "the tree after the failed install")
		})
	}
}
