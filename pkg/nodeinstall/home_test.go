package nodeinstall_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// TestDiscoverHome: the kubelet's HOME and working directory as systemd
// gives them, from its unit and drop-ins.
func TestDiscoverHome(t *testing.T) {
	const passwd = "root:x:0:0:root:/root:/bin/bash\nkube:x:990:990::/var/lib/kube-home:/usr/sbin/nologin\n"
	tests := []struct {
		name           string
		files          map[string]string
		home, workDir  string
		homeFrom       string
		wantErrContain string
	}{
		{name: "kubeadm: no HOME, working directory /", workDir: "/"},
		{
			name:  "User=root",
			files: map[string]string{"etc/systemd/system/kubelet.service.d/30-user.conf": "[Service]\nUser=root\n", "etc/passwd": passwd},
			home:  "/root", workDir: "/", homeFrom: "/etc/systemd/system/kubelet.service.d/30-user.conf:2",
		},
		{
			name:  "User=root without /etc/passwd: systemd's /root",
			files: map[string]string{"etc/systemd/system/kubelet.service.d/30-user.conf": "[Service]\nUser=root\n"},
			home:  "/root", workDir: "/", homeFrom: "/etc/systemd/system/kubelet.service.d/30-user.conf:2",
		},
		{
			name:  "User= by uid, WorkingDirectory=~",
			files: map[string]string{"etc/systemd/system/kubelet.service.d/30-user.conf": "[Service]\nUser=990\nWorkingDirectory=~\n", "etc/passwd": passwd},
			home:  "/var/lib/kube-home", workDir: "/var/lib/kube-home", homeFrom: "/etc/systemd/system/kubelet.service.d/30-user.conf:2",
		},
		{
			name:  "Environment=HOME= wins over User=",
			files: map[string]string{"etc/systemd/system/kubelet.service.d/30-user.conf": "[Service]\nUser=kube\nEnvironment=HOME=/srv/k\n", "etc/passwd": passwd},
			home:  "/srv/k", workDir: "/", homeFrom: "/etc/systemd/system/kubelet.service.d/30-user.conf:3",
		},
		{
			name: "the last drop-in wins; a reset User= gives no HOME",
			files: map[string]string{
				"etc/systemd/system/kubelet.service.d/30-user.conf": "[Service]\nUser=root\nWorkingDirectory=-/srv/a\n",
				"etc/systemd/system/kubelet.service.d/40-back.conf": "[Service]\nUser=\nWorkingDirectory=/srv/b\n",
				"etc/passwd": passwd,
			},
			workDir: "/srv/b",
		},
		{
			name:  "HOME from an EnvironmentFile=",
			files: map[string]string{"etc/systemd/system/kubelet.service.d/30-env.conf": "[Service]\nEnvironmentFile=/etc/kubelet-home\n", "etc/kubelet-home": "HOME=/srv/env\n"},
			home:  "/srv/env", workDir: "/", homeFrom: "/etc/kubelet-home:1",
		},
		{
			name:           "User= not in /etc/passwd",
			files:          map[string]string{"etc/systemd/system/kubelet.service.d/30-user.conf": "[Service]\nUser=nobody-here\n", "etc/passwd": passwd},
			wantErrContain: "/etc/systemd/system/kubelet.service.d/30-user.conf:2: User=nobody-here: no such user in /etc/passwd",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := node(t, "kubeadm")
			writeFiles(tt.files)(t, root)
			k, err := nodeinstall.Discover(root)
			if tt.wantErrContain != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErrContain)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.home, k.Home, "HOME")
			assert.Equal(t, tt.workDir, k.WorkDir, "working directory")
			assert.Equal(t, tt.homeFrom, k.HomeFrom.Where(), "where HOME comes from")
		})
	}
}
