package nodeinstall_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// TestKubeletStillAsksServe: after uninstall, a kubelet whose own files
// name serve's socket (a bootstrap recipe's setting) would have no image
// service; one that asks serve only through install's files is free.
func TestKubeletStillAsksServe(t *testing.T) {
	tests := []struct {
		name    string
		version string
		prepare func(t *testing.T, root string)
		want    string
	}{
		{name: "install's own settings only (a --config-dir added)", version: "v1.33.0"},
		{name: "install's settings merged into the kubelet's file", version: "v1.30.1"},
		{
			name:    "the kubelet's own file asks serve (a kubeadm patch of a recipe)",
			version: "v1.33.0",
			prepare: appendTo("var/lib/kubelet/config.yaml", "imageServiceEndpoint: unix:///run/pullguard/pullguard.sock\n"),
			want:    "/var/lib/kubelet/config.yaml:",
		},
		{
			name:    "only a comment names it",
			version: "v1.33.0",
			prepare: appendTo("var/lib/kubelet/config.yaml", "# imageServiceEndpoint: unix:///run/pullguard/pullguard.sock\n"),
		},
		{
			name:    "a flag in the kubelet's environment file asks serve",
			version: "v1.33.0",
			prepare: writeFiles(map[string]string{"etc/default/kubelet": "KUBELET_EXTRA_ARGS=--image-service-endpoint=unix:///run/pullguard/pullguard.sock\n"}),
			want:    "/etc/default/kubelet:1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := node(t, "kubeadm")
			if tt.prepare != nil {
				tt.prepare(t, root)
			}
			o := nodeinstall.Options{Root: root, KubeletVersion: version(tt.version)}
			p, err := nodeinstall.PlanInstall(o)
			require.NoError(t, err)
			_, err = nodeinstall.Install(o, p)
			require.NoError(t, err)
			u, err := nodeinstall.PlanUninstall(o, false)
			require.NoError(t, err)
			where, err := u.KubeletStillAsksServe(o)
			require.NoError(t, err)
			if tt.want == "" {
				assert.Empty(t, where)
				return
			}
			assert.True(t, strings.HasPrefix(where, tt.want), "%q starts with %q", where, tt.want)
		})
	}
}
