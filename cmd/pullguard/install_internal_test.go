package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
	"github.com/pullguard/pullguard/pkg/nodeinstall/nodeinstalltest"
)

// TestInstallRestartKubelet: --restart-kubelet drives the host's systemd
// (a fake here) and waits for doctor's checks (a fake that passes at the
// second call); uninstall --restart-kubelet takes the kubelet back.
func TestInstallRestartKubelet(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.CopyFS(root, os.DirFS("../../pkg/nodeinstall/testdata/eks")))
	sd := &nodeinstalltest.Systemd{}
	var dialed []string
	checks := 0
	defer func(d, r any, i time.Duration) {
		dialSystemd = d.(func(context.Context, string) (nodeinstall.Systemd, func(), error))
		nodeReady = r.(func(*nodeinstall.Plan) func(context.Context) error)
		readyInterval = i
	}(dialSystemd, nodeReady, readyInterval)
	readyInterval = time.Nanosecond
	dialSystemd = func(_ context.Context, r string) (nodeinstall.Systemd, func(), error) {
		dialed = append(dialed, r)
		return sd, func() {}, nil
	}
	nodeReady = func(p *nodeinstall.Plan) func(context.Context) error {
		return func(context.Context) error {
			checks++
			if checks < 2 {
				return fmt.Errorf("doctor: serve-answers: no answer on %s", p.ServeSocket)
			}
			return nil
		}
	}
	run := func(cmd *cobra.Command, args ...string) string {
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		require.NoError(t, cmd.Execute())
		return out.String()
	}
	out := run(newInstallCommand(), "--host-root", root, "--restart-kubelet")
	assert.Contains(t, out, "the kubelet restarted onto serve")
	assert.Equal(t, []string{root}, dialed, "systemd under the host root")
	assert.Equal(t, []string{"daemon-reload", "enable [pullguard.service pullguard.socket]", "start pullguard.socket", "restart pullguard.service", "restart kubelet.service"}, sd.Calls())
	assert.Equal(t, 2, checks, "doctor's checks until they pass")
	assert.FileExists(t, filepath.Join(root, "etc/kubernetes/kubelet/config.json.d/99-pullguard.conf"))

	sd.Reset()
	out = run(newUninstallCommand(), "--host-root", root, "--restart-kubelet")
	assert.Contains(t, out, "the kubelet restarted on its own settings")
	assert.Equal(t, []string{"disable [pullguard.service pullguard.socket]", "daemon-reload", "restart kubelet.service", "stop pullguard.service", "stop pullguard.socket"}, sd.Calls())
	assert.NoFileExists(t, filepath.Join(root, "etc/kubernetes/kubelet/config.json.d/99-pullguard.conf"))
}

// TestInstallRestartKubeletServeFails: serve does not start. The kubelet
// is not restarted, and install says that its files point at serve now,
// and what to do before its next restart.
func TestInstallRestartKubeletServeFails(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.CopyFS(root, os.DirFS("../../pkg/nodeinstall/testdata/eks")))
	sd := &nodeinstalltest.Systemd{Fail: "restart pullguard.service"}
	defer func(d any) {
		dialSystemd = d.(func(context.Context, string) (nodeinstall.Systemd, func(), error))
	}(dialSystemd)
	dialSystemd = func(context.Context, string) (nodeinstall.Systemd, func(), error) { return sd, func() {}, nil }
	cmd := newInstallCommand()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetArgs([]string{"--host-root", root, "--restart-kubelet"})
	err := cmd.Execute()
	require.Error(t, err)
	assert.ErrorIs(t, err, nodeinstall.ErrKubeletNotRestarted)
	assert.Contains(t, err.Error(), "restarting pullguard.service: job failed")
	assert.Contains(t, err.Error(), "its files now point at serve's unix:///run/pullguard/pullguard.sock")
	assert.Contains(t, err.Error(), "pullguard uninstall")
	assert.NotContains(t, sd.Calls(), "restart kubelet.service")
}

// TestInstallDoctorReadsTheInstalledKubelet: the doctor that
// --restart-kubelet waits for reads the kubelet as install left it, not as
// install found it: on a kubeadm node with a kubelet 1.33, install adds a
// --config-dir to /etc/default/kubelet, and doctor reads the drop-in there.
func TestInstallDoctorReadsTheInstalledKubelet(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.CopyFS(root, os.DirFS("../../pkg/nodeinstall/testdata/kubeadm")))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/bin/kubelet"), []byte("#!/bin/sh\necho Kubernetes v1.33.0\n"), 0o755))
	opts := nodeinstall.Options{Root: root}
	p, err := nodeinstall.PlanInstall(opts)
	require.NoError(t, err)
	require.Empty(t, p.Kubelet.Flag(nodeinstall.FlagConfigDir), "the kubelet had no --config-dir before install")
	_, err = nodeinstall.Install(opts, p)
	require.NoError(t, err)

	k, err := installDoctorOptions(p).readKubelet(context.Background(), func(severity, check, what, fix string) {
		t.Errorf("%s %s: %s (%s)", severity, check, what, fix)
	})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "/var/lib/kubelet/config.yaml"), k.path)
	assert.Equal(t, filepath.Join(root, nodeinstall.DefaultConfigDir), k.dir, "install's --config-dir")
	assert.Equal(t, p.ServeSocket, k.cfg.ImageServiceEndpoint, "from install's drop-in")
}
