package nodeconfig_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/pullguard/pullguard/pkg/nodeconfig"
)

// writeTree writes files (path under dir → content) and returns dir.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
	}
	return dir
}

// TestLoadKubeletConfigDir: the drop-ins of --config-dir merged over the
// --config file as the kubelet merges them (test/kubelet's
// TestKubeletDropInMergeParity runs the kubelet's own merge beside it),
// each field's origin the last file that sets it, and errors naming the
// file.
func TestLoadKubeletConfigDir(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string // under the test's directory: config.yaml and conf.d/
		gateOn  bool
		wantErr []string
		wantIs  error // what the error wraps; ErrInvalidConfig when nil
		check   func(t *testing.T, dir string, kc *nodeconfig.KubeletConfig)
	}{
		{
			name: "the snippet in a drop-in over kubeadm's file",
			files: map[string]string{
				"config.yaml":              kcHead + "cgroupDriver: systemd\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n",
				"conf.d/50-pullguard.conf": kcHead + "imageServiceEndpoint: unix:///run/pullguard/pullguard.sock\nregistryPullQPS: 0\nserializeImagePulls: false\nmaxParallelImagePulls: 10\n",
				"conf.d/README":            "not read",
				"conf.d/60-off.conf.bak":   kcHead + "registryPullQPS: 5\n",
			},
			gateOn: true,
			check: func(t *testing.T, dir string, kc *nodeconfig.KubeletConfig) {
				assert.Equal(t, "unix:///run/pullguard/pullguard.sock", kc.ImageServiceEndpoint)
				assert.Equal(t, ptr.To[int32](0), kc.RegistryPullQPS)
				assert.Equal(t, ptr.To(false), kc.SerializeImagePulls)
				assert.Equal(t, ptr.To[int32](10), kc.MaxParallelImagePulls)
				assert.Equal(t, filepath.Join(dir, "conf.d", "50-pullguard.conf"), kc.Origins["registryPullQPS"])
				assert.Equal(t, filepath.Join(dir, "config.yaml"), kc.Origins["cgroupDriver"])
				assert.Equal(t, []string{filepath.Join(dir, "config.yaml"), filepath.Join(dir, "conf.d", "50-pullguard.conf")}, kc.Files)
				assert.ElementsMatch(t, []string{filepath.Join(dir, "conf.d", "README"), filepath.Join(dir, "conf.d", "60-off.conf.bak")}, kc.Skipped)
				assert.Equal(t, kubeletconfig.NeverVerifyPreloadedImages, kc.ImagePullCredentialsVerificationPolicy, "defaulted under the kubelet's gate")
			},
		},
		{
			name: "lexical order: 20 before 9, a subdirectory in its place, featureGates merged, lists replaced",
			files: map[string]string{
				"config.yaml":          kcHead + "featureGates: {A: true}\npreloadedImagesVerificationAllowlist: [\"a/*\"]\n",
				"conf.d/20-b.conf":     kcHead + "registryBurst: 20\nfeatureGates: {B: true}\n",
				"conf.d/9-a.conf":      kcHead + "registryBurst: 9\npreloadedImagesVerificationAllowlist: [\"b/*\"]\n",
				"conf.d/10-sub/x.conf": kcHead + "registryBurst: 10\n",
			},
			check: func(t *testing.T, dir string, kc *nodeconfig.KubeletConfig) {
				assert.Equal(t, int32(9), kc.RegistryBurst)
				assert.Equal(t, map[string]bool{"A": true, "B": true}, kc.FeatureGates)
				assert.Equal(t, []string{"b/*"}, kc.PreloadedImagesVerificationAllowlist)
				assert.Equal(t, filepath.Join(dir, "conf.d", "9-a.conf"), kc.Origins["registryBurst"])
				assert.Empty(t, kc.ImagePullCredentialsVerificationPolicy, "not defaulted with the kubelet's gate off")
			},
		},
		{
			name: "null removes a field, which takes its default again",
			files: map[string]string{
				"config.yaml":   kcHead + "registryPullQPS: 0\nmaxParallelImagePulls: 1\n",
				"conf.d/1.conf": kcHead + "registryPullQPS: null\nserializeImagePulls: null\nmaxParallelImagePulls: 4\n",
			},
			check: func(t *testing.T, _ string, kc *nodeconfig.KubeletConfig) {
				assert.Equal(t, ptr.To[int32](nodeconfig.DefaultRegistryPullQPS), kc.RegistryPullQPS)
				assert.Equal(t, ptr.To(false), kc.SerializeImagePulls)
			},
		},
		{
			name: "maxParallelImagePulls in a drop-in: serializeImagePulls stays the file's default, true",
			files: map[string]string{
				"config.yaml":   kcHead,
				"conf.d/1.conf": kcHead + "maxParallelImagePulls: 10\n",
			},
			check: func(t *testing.T, _ string, kc *nodeconfig.KubeletConfig) {
				assert.Equal(t, ptr.To(true), kc.SerializeImagePulls)
			},
		},
		{name: "no kind", files: map[string]string{"config.yaml": kcHead, "conf.d/1.conf": "registryPullQPS: 0\n"}, wantErr: []string{"1.conf", "not a KubeletConfiguration"}},
		{name: "empty", files: map[string]string{"config.yaml": kcHead, "conf.d/1.conf": ""}, wantErr: []string{"1.conf", "empty"}},
		{name: "duplicated field", files: map[string]string{"config.yaml": kcHead, "conf.d/1.conf": kcHead + "registryBurst: 1\nregistryBurst: 2\n"}, wantErr: []string{"1.conf"}},
		{name: "wrong type", files: map[string]string{"config.yaml": kcHead, "conf.d/1.conf": kcHead + "registryPullQPS: fast\n"}, wantErr: []string{"conf.d", "wrong type"}},
		{name: "no directory", files: map[string]string{"config.yaml": kcHead}, wantErr: []string{"conf.d"}, wantIs: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeTree(t, tt.files)
			kc, err := nodeconfig.LoadKubeletConfigDir(filepath.Join(dir, "config.yaml"), filepath.Join(dir, "conf.d"), tt.gateOn)
			if tt.wantErr != nil {
				require.Error(t, err)
				if tt.wantIs == nil {
					tt.wantIs = nodeconfig.ErrInvalidConfig
				}
				assert.ErrorIs(t, err, tt.wantIs)
				for _, w := range tt.wantErr {
					assert.Contains(t, err.Error(), w)
				}
				return
			}
			require.NoError(t, err)
			tt.check(t, dir, kc)
		})
	}
}

// FuzzLoadKubeletConfigDir: any drop-in is merged or refused with an
// error, never a panic.
func FuzzLoadKubeletConfigDir(f *testing.F) {
	f.Add([]byte(kcHead + "registryPullQPS: 0\n"))
	f.Add([]byte(kcHead + "featureGates: {A: null}\nregistryBurst: null\n"))
	f.Add([]byte(`{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "RegistryBurst": 3}`))
	f.Add([]byte(kcHead + "preloadedImagesVerificationAllowlist: {a: 1}\n"))
	base := filepath.Join(f.TempDir(), "config.yaml")
	require.NoError(f, os.WriteFile(base, []byte(kcHead+"maxParallelImagePulls: 3\n"), 0o600))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "10.conf"), data, 0o600))
		kc, err := nodeconfig.LoadKubeletConfigDir(base, dir, true)
		if err == nil {
			assert.NotNil(t, kc.SerializeImagePulls, "defaulted after the merge")
		}
	})
}
