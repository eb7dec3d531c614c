package nodeinstall_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
	"github.com/pullguard/pullguard/pkg/nodeinstall/nodeinstalltest"
)

// TestInstallOptions: the binary, serve's flags and more files an agent
// gives install are written, recorded and given back; a change of serve's
// files alone restarts serve, not the kubelet; their bytes are never
// printed.
func TestInstallOptions(t *testing.T) {
	const secret = "token-that-must-not-be-printed"
	tests := []struct {
		name     string
		packaged bool
		// wantBinary: the binary is copied and serve's ExecStart runs it.
		wantBinary bool
		wantNote   string
	}{
		{name: "no package: the binary copied, serve runs it", wantBinary: true},
		{name: "the package's units: its binary runs, none copied", packaged: true, wantNote: "serve's units are the package's: its binary /usr/bin/pullguard runs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := nodeinstalltest.Layout(t, "kubeadm")
			if tt.packaged {
				unit, err := os.ReadFile("../../deploy/systemd/pullguard.service")
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(root, "usr/lib/systemd/system/pullguard.service"), unit, 0o644))
			}
			src := filepath.Join(t.TempDir(), "pullguard")
			require.NoError(t, os.WriteFile(src, []byte("binary v1\x00"), 0o755))
			o := nodeinstall.Options{
				Root:           root,
				KubeletVersion: version("v1.33.4"),
				Binary:         &nodeinstall.Binary{Path: "/opt/pullguard/bin/pullguard", Source: src},
				ServeArgs:      []string{"--secure-port=10265", "--metrics-bind-address=127.0.0.1:10299"},
				Files:          []nodeinstall.File{{Path: "/etc/pullguard/serve.kubeconfig", Data: []byte("token: " + secret + "\n"), Mode: 0o600, Why: "serve's kubeconfig", Opaque: true}},
			}
			before := durabletest.Tree(t, root)
			p, err := nodeinstall.PlanInstall(o)
			require.NoError(t, err)
			assert.True(t, p.KubeletChanged(), "a fresh install restarts the kubelet")
			if tt.wantNote != "" {
				assert.Contains(t, p.Notes, tt.wantNote+", /opt/pullguard/bin/pullguard is not copied")
			}
			assert.Equal(t, "127.0.0.1:10299", p.ServeMetrics, "ServeArgs' address: where doctor asks serve's /healthz")
			var out bytes.Buffer
			nodeinstall.Print(&out, p.Changes)
			assert.NotContains(t, out.String(), secret, "an opaque file's bytes are not printed")
			assert.Contains(t, out.String(), "/etc/pullguard/serve.kubeconfig: serve's kubeconfig")
			_, err = nodeinstall.Install(o, p)
			require.NoError(t, err)

			kc, err := os.Stat(filepath.Join(root, "etc/pullguard/serve.kubeconfig"))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), kc.Mode().Perm())
			dropIn, err := os.ReadFile(filepath.Join(root, nodeinstall.ServeDropIn))
			require.NoError(t, err)
			assert.Contains(t, string(dropIn), "--secure-port 10265")
			assert.Contains(t, string(dropIn), "--metrics-bind-address 127.0.0.1:10299")
			assert.NotContains(t, string(dropIn), "127.0.0.1:10264", "a flag of ServeArgs replaces the unit's")
			_, err = os.Stat(filepath.Join(root, "opt/pullguard/bin/pullguard"))
			if tt.wantBinary {
				require.NoError(t, err)
				assert.Contains(t, string(dropIn), "ExecStart=/opt/pullguard/bin/pullguard serve")
			} else {
				assert.ErrorIs(t, err, os.ErrNotExist)
				assert.Contains(t, string(dropIn), "ExecStart=/usr/bin/pullguard serve")
			}

			// A new binary: serve's files alone change.
			require.NoError(t, os.WriteFile(src, []byte("binary v2\x00"), 0o755))
			p, err = nodeinstall.PlanInstall(o)
			require.NoError(t, err)
			assert.Equal(t, tt.wantBinary, p.Changed())
			assert.False(t, p.KubeletChanged(), "a new binary does not restart the kubelet")
			_, err = nodeinstall.Install(o, p)
			require.NoError(t, err)

			u, err := nodeinstall.PlanUninstall(nodeinstall.Options{Root: root}, false)
			require.NoError(t, err)
			out.Reset()
			nodeinstall.Print(&out, u.Changes)
			assert.NotContains(t, out.String(), secret)
			require.NoError(t, nodeinstall.Uninstall(nodeinstall.Options{Root: root}, u))
			assert.Equal(t, before, durabletest.Tree(t, root), "uninstall removes the binary and the files, byte for byte")
		})
	}
}

func TestInstallServeArgsRefused(t *testing.T) {
	for _, arg := range []string{"secure-port=1", "--secure-port", "--=x", "--secure-port="} {
		t.Run(arg, func(t *testing.T) {
			root := nodeinstalltest.Layout(t, "kubeadm")
			_, err := nodeinstall.PlanInstall(nodeinstall.Options{Root: root, KubeletVersion: version("v1.33.4"), ServeArgs: []string{arg}})
			assert.ErrorContains(t, err, "not --name=value")
		})
	}
}
