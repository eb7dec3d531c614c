package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kubeadmNode is a scratch host root with the kubeadm layout of
// pkg/nodeinstall's tests and a kubelet binary that prints version.
func kubeadmNode(t *testing.T, version string) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.CopyFS(root, os.DirFS("../../pkg/nodeinstall/testdata/kubeadm")))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/bin/kubelet"), []byte("#!/bin/sh\necho Kubernetes "+version+"\n"), 0o755))
	return root
}

func goldenFile(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "go test -update writes it")
	assert.Equal(t, string(want), got, "%s (go test -update rewrites it)", path)
}

// TestInstallCommand: on a kubeadm node (kubelet 1.33), --dry-run prints
// the change and writes nothing; install, install again (nothing to
// change), uninstall --dry-run (nothing written), uninstall: the node is
// back byte for byte.
func TestInstallCommand(t *testing.T) {
	root := kubeadmNode(t, "v1.33.4")
	before := durabletest.Tree(t, root)

	res := pullguard(t, "install", "--host-root", root, "--dry-run")
	require.Equal(t, 0, res.code, res.stderr)
	goldenFile(t, "install-dry-run-kubeadm.txt", res.stdout)
	assert.Equal(t, before, durabletest.Tree(t, root), "--dry-run writes nothing")

	res = pullguard(t, "install", "--host-root", root)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "installed; `pullguard uninstall` gives the node back")
	assert.Contains(t, res.stdout, "next: systemctl daemon-reload && systemctl enable --now pullguard.service")
	installed := durabletest.Tree(t, root)
	assert.Equal(t, before["var/lib/kubelet/config.yaml"], installed["var/lib/kubelet/config.yaml"], "config.yaml untouched: kubeadm upgrade rewrites it")

	res = pullguard(t, "install", "--host-root", root)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "pullguard is installed: nothing to change")
	assert.NotContains(t, res.stdout, "create ")
	assert.NotContains(t, res.stdout, "modify ")
	assert.Equal(t, installed, durabletest.Tree(t, root))

	res = pullguard(t, "uninstall", "--host-root", root, "--dry-run")
	require.Equal(t, 0, res.code, res.stderr)
	goldenFile(t, "uninstall-dry-run-kubeadm.txt", res.stdout)
	assert.Equal(t, installed, durabletest.Tree(t, root), "--dry-run writes nothing")

	res = pullguard(t, "uninstall", "--host-root", root)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, before, durabletest.Tree(t, root), "the node back byte for byte")

	res = pullguard(t, "uninstall", "--host-root", root)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "nothing to uninstall")
}

// TestInstallCommandRefuses: an unparsable kubelet file is refused with its
// file and line, exit status 1, and nothing written.
func TestInstallCommandRefuses(t *testing.T) {
	root := kubeadmNode(t, "v1.30.2")
	cfg := filepath.Join(root, "var/lib/kubelet/config.yaml")
	data, err := os.ReadFile(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Replace(string(data), "clusterDomain: cluster.local", "clusterDomain: [cluster.local", 1)), 0o644))
	before := durabletest.Tree(t, root)

	res := pullguard(t, "install", "--host-root", root)
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "refused: /var/lib/kubelet/config.yaml:")
	assert.Equal(t, before, durabletest.Tree(t, root), "nothing written")
}

// TestUninstallCommandRefusesARecipeNode: a kubelet whose own
// configuration asks serve's socket would have no image service once
// uninstall stops serve: uninstall refuses, with the file and line, and
// changes nothing.
func TestUninstallCommandRefusesARecipeNode(t *testing.T) {
	root := kubeadmNode(t, "v1.33.4")
	cfg := filepath.Join(root, "var/lib/kubelet/config.yaml")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("imageServiceEndpoint: unix:///run/pullguard/pullguard.sock\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	res := pullguard(t, "install", "--host-root", root)
	require.Equal(t, 0, res.code, res.stderr)
	installed := durabletest.Tree(t, root)

	res = pullguard(t, "uninstall", "--host-root", root)
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "refused: /var/lib/kubelet/config.yaml:")
	assert.Contains(t, res.stderr, "the kubelet's own configuration asks serve's socket")
	assert.Equal(t, installed, durabletest.Tree(t, root), "nothing changed")
}
