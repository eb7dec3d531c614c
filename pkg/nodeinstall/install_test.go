package nodeinstall_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// node copies a layout of testdata/ into a scratch host root.
func node(t *testing.T, layout string) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.CopyFS(root, os.DirFS(filepath.Join("testdata", layout))))
	return root
}

func version(v string) func(string) (string, error) {
	return func(binary string) (string, error) {
		if v == "" {
			return "", fmt.Errorf("fork/exec %s: no such file or directory", binary)
		}
		return "Kubernetes " + v + "\n", nil
	}
}

func golden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update")
	assert.Equal(t, string(want), got, "%s (go test -update rewrites it)", path)
}

func appendTo(rel, text string) func(t *testing.T, root string) {
	return func(t *testing.T, root string) {
		f, err := os.OpenFile(filepath.Join(root, rel), os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteString(text)
		require.NoError(t, err)
	}
}

// writeFiles writes files (relative to the host root) for a layout.
func writeFiles(files map[string]string) func(t *testing.T, root string) {
	return func(t *testing.T, root string) {
		for rel, text := range files {
			p := filepath.Join(root, rel)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		}
	}
}

// TestInstallUninstall installs on each layout, installs again (nothing
// changes, nothing is written), uninstalls, and finds the whole tree as
// it was, byte for byte.
func TestInstallUninstall(t *testing.T) {
	tests := []struct {
		name    string
		layout  string
		version string // "" when the kubelet's binary does not run
		setup   func(t *testing.T, root string)
		// untouched are files install leaves as they were; created the
		// kubelet's files it writes.
		untouched, created []string
		// kubelet are the kubelet's files install merged into.
		kubelet []string
		// configDir is the kubelet's --config-dir after install.
		configDir string
		// serve are words serve's drop-in must hold.
		serve []string
	}{
		{
			name:      "kubeadm, kubelet 1.30: merged into config.yaml",
			layout:    "kubeadm",
			version:   "v1.30.14",
			untouched: []string{"var/lib/kubelet/kubeadm-flags.env", "etc/default/kubelet"},
			kubelet:   []string{"var/lib/kubelet/config.yaml"},
			serve:     []string{"--config /var/lib/kubelet/config.yaml", "--image-service-endpoint unix:///var/run/containerd/containerd.sock", "--kubelet-root-dir /var/lib/kubelet"},
		},
		{
			name:      "kubeadm, kubelet that does not run: merged, and said so",
			layout:    "kubeadm",
			kubelet:   []string{"var/lib/kubelet/config.yaml"},
			untouched: []string{"var/lib/kubelet/kubeadm-flags.env", "etc/default/kubelet"},
		},
		{
			name:      "kubeadm, kubelet 1.33: --config-dir added to /etc/default/kubelet",
			layout:    "kubeadm",
			version:   "v1.33.4",
			untouched: []string{"var/lib/kubelet/config.yaml", "var/lib/kubelet/kubeadm-flags.env"},
			created:   []string{"etc/kubernetes/kubelet.conf.d/99-pullguard.conf"},
			configDir: "/etc/kubernetes/kubelet.conf.d",
		},
		{
			// A --config-dir would make the kubelet read these as unset and
			// take its defaults ([pods], the default thresholds).
			name:      "kubeadm, kubelet 1.33, empty lists in config.yaml: merged, not given a --config-dir",
			layout:    "kubeadm",
			version:   "v1.33.4",
			setup:     appendTo("var/lib/kubelet/config.yaml", "enforceNodeAllocatable: []\nevictionHard: {}\n"),
			untouched: []string{"var/lib/kubelet/kubeadm-flags.env", "etc/default/kubelet"},
			kubelet:   []string{"var/lib/kubelet/config.yaml"},
		},
		{
			name:      "kubeadm with a --config-dir: a drop-in, config.yaml untouched",
			layout:    "kubeadm",
			version:   "v1.33.4",
			setup:     appendTo("etc/default/kubelet", "KUBELET_EXTRA_ARGS=\"--config-dir=/etc/kubernetes/kubelet.conf.d\"\n"),
			untouched: []string{"var/lib/kubelet/config.yaml", "var/lib/kubelet/kubeadm-flags.env", "etc/default/kubelet"},
			created:   []string{"etc/kubernetes/kubelet.conf.d/99-pullguard.conf"},
		},
		{
			name:    "kubeadm with the package's units: none written, serve's drop-in from the package's unit",
			layout:  "kubeadm",
			version: "v1.33.4",
			setup: func(t *testing.T, root string) {
				unit, err := os.ReadFile("../../deploy/systemd/pullguard.service")
				require.NoError(t, err)
				unit = []byte(strings.Replace(string(unit), "/usr/local/bin/pullguard serve", "/usr/bin/pullguard serve", 1))
				require.NoError(t, os.WriteFile(filepath.Join(root, "usr/lib/systemd/system/pullguard.service"), unit, 0o644))
			},
			untouched: []string{"usr/lib/systemd/system/pullguard.service", "var/lib/kubelet/config.yaml"},
			created:   []string{"etc/kubernetes/kubelet.conf.d/99-pullguard.conf"},
			serve:     []string{"ExecStart=/usr/bin/pullguard serve"},
		},
		{
			// systemd gives a unit with User= its user's HOME: the kubelet
			// searches /root/.docker, and so must serve.
			name:      "kubeadm kubelet with User=root: serve given HOME=/root",
			layout:    "kubeadm",
			version:   "v1.30.14",
			setup:     writeFiles(map[string]string{"etc/systemd/system/kubelet.service.d/30-user.conf": "[Service]\nUser=root\n", "etc/passwd": "root:x:0:0:root:/root:/bin/bash\n"}),
			untouched: []string{"var/lib/kubelet/kubeadm-flags.env", "etc/default/kubelet"},
			kubelet:   []string{"var/lib/kubelet/config.yaml"},
			serve:     []string{"Environment=HOME=/root"},
		},
		{
			name:      "kubeadm kubelet with Environment=HOME=/srv/k and WorkingDirectory=/srv/k: serve given both",
			layout:    "kubeadm",
			version:   "v1.30.14",
			setup:     writeFiles(map[string]string{"etc/systemd/system/kubelet.service.d/30-home.conf": "[Service]\nEnvironment=HOME=/srv/k\nWorkingDirectory=/srv/k\n"}),
			untouched: []string{"var/lib/kubelet/kubeadm-flags.env", "etc/default/kubelet"},
			kubelet:   []string{"var/lib/kubelet/config.yaml"},
			serve:     []string{"Environment=HOME=/srv/k", "WorkingDirectory=/srv/k"},
		},
		{
			name:      "EKS AL2023: config.json and config.json.d",
			layout:    "eks",
			version:   "v1.33.4-eks-1234",
			untouched: []string{"etc/kubernetes/kubelet/config.json", "etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf", "etc/eks/kubelet/environment"},
			created:   []string{"etc/kubernetes/kubelet/config.json.d/99-pullguard.conf"},
			serve: []string{"--config /etc/kubernetes/kubelet/config.json", "--image-credential-provider-config /etc/eks/image-credential-provider/config.json",
				"--image-credential-provider-bin-dir /etc/eks/image-credential-provider", "--image-service-endpoint unix:///run/containerd/containerd.sock"},
		},
		{
			name:    "EKS with a kubelet 1.33 and no --config-dir: one given in a drop-in of the kubelet's unit",
			layout:  "eks",
			version: "v1.33.4",
			setup: func(t *testing.T, root string) {
				rewrite(t, root, "etc/eks/kubelet/environment", " --config-dir=/etc/kubernetes/kubelet/config.json.d", "")
			},
			untouched: []string{"etc/kubernetes/kubelet/config.json", "etc/eks/kubelet/environment", "etc/systemd/system/kubelet.service"},
			created:   []string{"etc/kubernetes/kubelet.conf.d/99-pullguard.conf"},
			configDir: "/etc/kubernetes/kubelet.conf.d",
		},
		{
			name:    "EKS with a kubelet 1.30 and its JSON file merged",
			layout:  "eks",
			version: "v1.30.2",
			setup: func(t *testing.T, root string) {
				rewrite(t, root, "etc/eks/kubelet/environment", " --config-dir=/etc/kubernetes/kubelet/config.json.d", "")
			},
			untouched: []string{"etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf", "etc/eks/kubelet/environment"},
			kubelet:   []string{"etc/kubernetes/kubelet/config.json"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := node(t, tt.layout)
			if tt.setup != nil {
				tt.setup(t, root)
			}
			o := nodeinstall.Options{Root: root, KubeletVersion: version(tt.version)}
			before := durabletest.Tree(t, root)

			p, err := nodeinstall.PlanInstall(o)
			require.NoError(t, err)
			require.True(t, p.Changed())
			var out bytes.Buffer
			for _, n := range p.Notes {
				fmt.Fprintf(&out, "note: %s\n", strings.ReplaceAll(n, root, "ROOT"))
			}
			nodeinstall.Print(&out, p.Changes)
			golden(t, "install-"+slug(tt.name), out.String())
			assert.Equal(t, before, durabletest.Tree(t, root), "planning writes nothing")

			_, err = nodeinstall.Install(o, p)
			require.NoError(t, err)
			after := durabletest.Tree(t, root)
			for _, f := range tt.untouched {
				assert.Equal(t, before[f], after[f], "%s untouched", f)
			}
			for _, f := range tt.created {
				assert.Contains(t, after[f], "imageServiceEndpoint: unix:///run/pullguard/pullguard.sock", f)
			}
			// The kubelet's reader takes each file the kubelet reads now.
			for _, f := range append(slices.Clone(tt.created), tt.kubelet...) {
				cfg, _, err := nodeconfig.LoadKubeletConfig(filepath.Join(root, f))
				require.NoError(t, err, f)
				assert.Equal(t, "unix:///run/pullguard/pullguard.sock", cfg.ImageServiceEndpoint, f)
				assert.Equal(t, ptr.To(int32(0)), cfg.RegistryPullQPS, f)
			}
			k, err := nodeinstall.Discover(root)
			require.NoError(t, err)
			if tt.configDir != "" {
				assert.Equal(t, tt.configDir, k.Flag(nodeinstall.FlagConfigDir), "the kubelet's --config-dir after install")
			}
			if _, err := os.Stat(filepath.Join(root, "usr/lib/systemd/system/pullguard.service")); err == nil {
				assert.NotContains(t, after, "etc/systemd/system/pullguard.service", "the package's unit is not written again")
			}
			dropIn := after["etc/systemd/system/pullguard.service.d/20-kubelet.conf"]
			for _, w := range tt.serve {
				assert.True(t, strings.Contains(dropIn, w+" ") || strings.Contains(dropIn, w+"\n"), "serve's drop-in has %q:\n%s", w, dropIn)
			}

			// Again: nothing changes, nothing is written.
			rec := durabletest.Record(t, root)
			p2, err := nodeinstall.PlanInstall(o)
			require.NoError(t, err)
			var again bytes.Buffer
			nodeinstall.Print(&again, p2.Changes)
			assert.False(t, p2.Changed(), "a second install changes nothing:\n%s", again.String())
			_, err = nodeinstall.Install(o, p2)
			require.NoError(t, err)
			assert.Empty(t, rec.Ops(), "a second install writes nothing")
			assert.Equal(t, after, durabletest.Tree(t, root))

			u, err := nodeinstall.PlanUninstall(o, false)
			require.NoError(t, err)
			assert.False(t, u.Kept())
			require.NoError(t, nodeinstall.Uninstall(o, u))
			assert.Equal(t, before, durabletest.Tree(t, root), "uninstall gives the node back byte for byte, and leaves nothing")

			_, err = nodeinstall.PlanUninstall(o, false)
			assert.ErrorIs(t, err, nodeinstall.ErrNotInstalled)
		})
	}
}

func slug(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

func rewrite(t *testing.T, root, rel, old, new string) {
	t.Helper()
	p := filepath.Join(root, rel)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Contains(t, string(data), old)
	require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(data), old, new, 1)), 0o644))
}

// TestInstallRefuses: a configuration that does not parse, or that points
// the kubelet's image service elsewhere, is refused with its file and
// line, and nothing is written.
func TestInstallRefuses(t *testing.T) {
	tests := []struct {
		name   string
		layout string
		setup  func(t *testing.T, root string)
		want   string
	}{
		{
			name:   "config.yaml does not parse",
			layout: "kubeadm",
			setup: func(t *testing.T, root string) {
				rewrite(t, root, "var/lib/kubelet/config.yaml", "cgroupDriver: systemd", "cgroupDriver: [systemd")
			},
			want: "/var/lib/kubelet/config.yaml:",
		},
		{
			name:   "a drop-in of config.json.d does not parse",
			layout: "eks",
			setup: func(t *testing.T, root string) {
				rewrite(t, root, "etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf", `"30s"`, `"30s",,`)
			},
			want: "/etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf:",
		},
		{
			name:   "imageServiceEndpoint in config.yaml is another socket",
			layout: "kubeadm",
			setup:  appendTo("var/lib/kubelet/config.yaml", "imageServiceEndpoint: unix:///run/other/image.sock\n"),
			want:   "/var/lib/kubelet/config.yaml:57: the kubelet's image service is unix:///run/other/image.sock",
		},
		{
			name:   "--image-service-endpoint in a flags file",
			layout: "kubeadm",
			setup:  appendTo("etc/default/kubelet", "KUBELET_EXTRA_ARGS=--image-service-endpoint=unix:///run/other/image.sock\n"),
			want:   "/etc/default/kubelet:2: --image-service-endpoint: the kubelet's image service is unix:///run/other/image.sock",
		},
		{
			name:   "the kubelet's runtime endpoint is serve's socket",
			layout: "kubeadm",
			setup: func(t *testing.T, root string) {
				rewrite(t, root, "var/lib/kubelet/kubeadm-flags.env", "unix:///var/run/containerd/containerd.sock", "unix:///run/pullguard/pullguard.sock")
			},
			want: "the kubelet's containerRuntimeEndpoint is serve's socket",
		},
		{
			name:   "imageServiceEndpoint in a drop-in",
			layout: "eks",
			setup: func(t *testing.T, root string) {
				require.NoError(t, os.WriteFile(filepath.Join(root, "etc/kubernetes/kubelet/config.json.d/50-image.conf"),
					[]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageServiceEndpoint: unix:///run/other/image.sock\n"), 0o644))
			},
			want: "/etc/kubernetes/kubelet/config.json.d/50-image.conf:3: the kubelet's image service is unix:///run/other/image.sock",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := node(t, tt.layout)
			tt.setup(t, root)
			before := durabletest.Tree(t, root)
			_, err := nodeinstall.PlanInstall(nodeinstall.Options{Root: root, KubeletVersion: version("v1.33.0")})
			require.ErrorIs(t, err, nodeinstall.ErrRefused)
			assert.Contains(t, err.Error(), tt.want)
			assert.Equal(t, before, durabletest.Tree(t, root), "nothing written")
		})
	}
}

// TestUninstallKeepsWhatChanged: a file changed after install is left as
// it is, with its original kept under the store; the rest is given back.
func TestUninstallKeepsWhatChanged(t *testing.T) {
	root := node(t, "kubeadm")
	o := nodeinstall.Options{Root: root, KubeletVersion: version("v1.30.1")}
	p, err := nodeinstall.PlanInstall(o)
	require.NoError(t, err)
	_, err = nodeinstall.Install(o, p)
	require.NoError(t, err)
	appendTo("var/lib/kubelet/config.yaml", "maxOpenFiles: 100\n")(t, root)
	edited, err := os.ReadFile(filepath.Join(root, "var/lib/kubelet/config.yaml"))
	require.NoError(t, err)

	u, err := nodeinstall.PlanUninstall(o, false)
	require.NoError(t, err)
	require.True(t, u.Kept())
	require.NoError(t, nodeinstall.Uninstall(o, u))
	got, err := os.ReadFile(filepath.Join(root, "var/lib/kubelet/config.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(edited), string(got), "not clobbered")
	original, err := os.ReadFile(filepath.Join(root, "var/lib/pullguard/install/backup/var/lib/kubelet/config.yaml"))
	require.NoError(t, err)
	want, err := os.ReadFile("testdata/kubeadm/var/lib/kubelet/config.yaml")
	require.NoError(t, err)
	assert.Equal(t, string(want), string(original), "the original is kept")
	assert.NoFileExists(t, filepath.Join(root, "etc/systemd/system/pullguard.service"), "what did not change is removed")
}

// TestUninstallKeepRecords: --keep-records keeps serve's store but the
// install's manifest and copies.
func TestUninstallKeepRecords(t *testing.T) {
	root := node(t, "eks")
	o := nodeinstall.Options{Root: root, KubeletVersion: version("v1.33.0")}
	p, err := nodeinstall.PlanInstall(o)
	require.NoError(t, err)
	_, err = nodeinstall.Install(o, p)
	require.NoError(t, err)
	records := filepath.Join(root, "var/lib/pullguard/credtracker")
	require.NoError(t, os.MkdirAll(records, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(records, "records.db"), []byte("x"), 0o600))

	u, err := nodeinstall.PlanUninstall(o, true)
	require.NoError(t, err)
	require.NoError(t, nodeinstall.Uninstall(o, u))
	assert.FileExists(t, filepath.Join(records, "records.db"))
	assert.NoDirExists(t, filepath.Join(root, "var/lib/pullguard/install"))
}

// TestInstallCrash kills install after each of its writes: every file is
// then its old or its new self, never a mix, and uninstall gives the node
// back as it was.
func TestInstallCrash(t *testing.T) {
	want := map[string]string{}
	durabletest.Crash(t, durabletest.CrashCase{
		Setup: func(t *testing.T, dir string) {
			require.NoError(t, os.CopyFS(dir, os.DirFS("testdata/kubeadm")))
			if len(want) == 0 {
				for k, v := range durabletest.Tree(t, dir) {
					want[k] = v
				}
			}
		},
		Write: func(dir string) error {
			o := nodeinstall.Options{Root: dir, KubeletVersion: version("v1.30.1")}
			p, err := nodeinstall.PlanInstall(o)
			if err != nil {
				return err
			}
			_, err = nodeinstall.Install(o, p)
			return err
		},
		Check: func(t *testing.T, dir string, o durabletest.Outcome) {
			got := durabletest.Tree(t, dir)
			for f, v := range want {
				if strings.HasSuffix(f, "/") {
					continue
				}
				if got[f] != v {
					assert.Contains(t, got[f], "imageServiceEndpoint: unix:///run/pullguard/pullguard.sock", "%s: neither old nor new", f)
				}
			}
			opts := nodeinstall.Options{Root: dir, KubeletVersion: version("v1.30.1")}
			u, err := nodeinstall.PlanUninstall(opts, false)
			if errors.Is(err, nodeinstall.ErrNotInstalled) {
				// Killed before the manifest: nothing but the copies of the
				// originals under the store.
				for f := range got {
					if _, ok := want[f]; !ok {
						assert.True(t, strings.HasPrefix(f, "var/"), "%s written before the manifest", f)
					}
				}
				return
			}
			require.NoError(t, err)
			assert.False(t, u.Kept(), "%s", o)
			require.NoError(t, nodeinstall.Uninstall(opts, u))
			after := durabletest.Tree(t, dir)
			for f, v := range after {
				if durableTemp(f) {
					continue
				}
				assert.Equal(t, want[f], v, "%s after uninstall (%s)", f, o)
			}
			for f := range want {
				assert.Contains(t, after, f)
			}
		},
	})
}

// durableTemp says whether a path is a temporary file a killed write left.
func durableTemp(p string) bool { return strings.Contains(filepath.Base(p), ".tmp-") }
