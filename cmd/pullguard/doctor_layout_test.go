package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDoctorReadsTheKubeletsUnit: with no --kubelet-flags-files, doctor
// takes the kubelet's flags from its unit as systemd starts it, under the
// node's root: on EKS AL2023 (nodeadm's environment file), its --config
// config.json with the drop-ins of config.json.d and its
// credential-provider flags; on kubeadm, kubeadm-flags.env's and
// /etc/default/kubelet's.
func TestDoctorReadsTheKubeletsUnit(t *testing.T) {
	tests := []struct {
		name      string
		root      string
		wantFlags map[string]string // flag → "value@file"
		check     func(t *testing.T, k *kubeletView)
	}{
		{
			name: "EKS AL2023",
			root: filepath.Join("..", "..", "pkg", "nodeinstall", "testdata", "eks"),
			wantFlags: map[string]string{
				"image-credential-provider-config": "/etc/eks/image-credential-provider/config.json@/etc/eks/kubelet/environment",
				"config-dir":                       "/etc/kubernetes/kubelet/config.json.d@/etc/eks/kubelet/environment",
			},
			check: func(t *testing.T, k *kubeletView) {
				assert.Equal(t, "/etc/kubernetes/kubelet/config.json.d", k.dir[len(k.dir)-len("/etc/kubernetes/kubelet/config.json.d"):])
				assert.Contains(t, k.origins["shutdownGracePeriod"], "40-nodeadm.conf", "the drop-in's field")
			},
		},
		{
			name:      "kubeadm",
			root:      filepath.Join("..", "..", "pkg", "nodeinstall", "testdata", "kubeadm"),
			wantFlags: map[string]string{"container-runtime-endpoint": "unix:///var/run/containerd/containerd.sock@/var/lib/kubelet/kubeadm-flags.env"},
			check: func(t *testing.T, k *kubeletView) {
				assert.Empty(t, k.dir)
				assert.Equal(t, "unix:///var/run/containerd/containerd.sock", k.cfg.ContainerRuntimeEndpoint, "the flag over the file")
				assert.Equal(t, "/var/lib/kubelet/config.yaml", k.path[len(k.path)-len("/var/lib/kubelet/config.yaml"):], "10-kubeadm.conf's --config")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, err := filepath.Abs(tt.root)
			require.NoError(t, err)
			o := &doctorOptions{hostRoot: root, kubeletConfig: filepath.Join(root, "/var/lib/kubelet/config.yaml"), set: map[string]bool{}}
			k, err := o.readKubelet(context.Background(), func(severity, check, what, fix string) { t.Errorf("finding %s %s: %s", severity, check, what) })
			require.NoError(t, err)
			for flag, want := range tt.wantFlags {
				f, ok := k.flags[flag]
				require.True(t, ok, "--%s", flag)
				assert.Equal(t, want, f.value+"@"+f.file, "--%s", flag)
			}
			tt.check(t, k)
		})
	}
}
