package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	_ "unsafe" // go:linkname, to run the kubelet's own unexported merge

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletconversion "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"

	_ "k8s.io/kubernetes/cmd/kubelet/app" // the functions linked below
)

// The kubelet v1.36's own steps of reading --config and --config-dir
// (cmd/kubelet/app/server.go), called as they are, not copied.
//
//go:linkname kubeletLoadConfigFile k8s.io/kubernetes/cmd/kubelet/app.loadConfigFile
func kubeletLoadConfigFile(ctx context.Context, name string) (*kubeletconfiginternal.KubeletConfiguration, error)

//go:linkname kubeletMergeConfigurations k8s.io/kubernetes/cmd/kubelet/app.mergeKubeletConfigurations
func kubeletMergeConfigurations(kc *kubeletconfiginternal.KubeletConfiguration, dir string) ([]string, error)

// kubeletDropInMerge builds the configuration as the kubelet does before
// its flags: its --config file (or its defaults with none), then the
// drop-ins of dir merged over it; returned as v1beta1.
//
// The kubelet's defaulting panics on featureGates it cannot set (a gate
// locked to its default): that is a refusal too.
func kubeletDropInMerge(t *testing.T, file, dir string) (_ *kubeletv1beta1.KubeletConfiguration, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	var kc *kubeletconfiginternal.KubeletConfiguration
	if file != "" {
		if kc, err = kubeletLoadConfigFile(context.Background(), file); err != nil {
			return nil, err
		}
	} else {
		kc, err = options.NewKubeletConfiguration()
		require.NoError(t, err)
	}
	if _, err := kubeletMergeConfigurations(kc, dir); err != nil {
		return nil, err
	}
	out := &kubeletv1beta1.KubeletConfiguration{}
	require.NoError(t, kubeletconversion.Convert_config_KubeletConfiguration_To_v1beta1_KubeletConfiguration(kc, out, nil))
	return out, nil
}

// readFields are the fields pullguard reads, with the kubelet's defaults
// for those the kubelet defaults after the merge (pullguard applies them
// when it resolves its Settings).
type readFields struct {
	SerializeImagePulls      bool
	MaxParallelImagePulls    *int32
	RegistryPullQPS          int32
	RegistryBurst            int32
	ContainerRuntimeEndpoint string
	ImageServiceEndpoint     string
	Policy                   string
	Allowlist                []string
	FeatureGates             map[string]bool
	RuntimeRequestTimeout    string
}

func fieldsOf(c *kubeletv1beta1.KubeletConfiguration) readFields {
	f := readFields{
		SerializeImagePulls:      ptr.Deref(c.SerializeImagePulls, true),
		MaxParallelImagePulls:    c.MaxParallelImagePulls,
		RegistryPullQPS:          ptr.Deref(c.RegistryPullQPS, 5),
		RegistryBurst:            c.RegistryBurst,
		ContainerRuntimeEndpoint: c.ContainerRuntimeEndpoint,
		ImageServiceEndpoint:     c.ImageServiceEndpoint,
		Policy:                   string(c.ImagePullCredentialsVerificationPolicy),
		Allowlist:                c.PreloadedImagesVerificationAllowlist,
		FeatureGates:             c.FeatureGates,
		RuntimeRequestTimeout:    c.RuntimeRequestTimeout.Duration.String(),
	}
	if f.RegistryBurst == 0 {
		f.RegistryBurst = 10
	}
	if f.ContainerRuntimeEndpoint == "" {
		f.ContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	}
	if gate, set := c.FeatureGates["KubeletEnsureSecretPulledImages"]; f.Policy == "" && (gate || !set) {
		f.Policy = "NeverVerifyPreloadedImages" // the kubelet's gate on (its 1.36 default)
	}
	if f.RuntimeRequestTimeout == "0s" {
		f.RuntimeRequestTimeout = "2m0s"
	}
	if len(f.FeatureGates) == 0 {
		f.FeatureGates = nil
	}
	if len(f.Allowlist) == 0 {
		f.Allowlist = nil
	}
	return f
}

// TestKubeletDropInMergeParity: for --config files and --config-dir
// drop-ins combining what the kubelet's merge does (lexical order, *.conf
// only, subdirectories, featureGates merged key by key, lists replaced,
// null removing a field, defaults of the --config file under the
// drop-ins, a field of the wrong type, a drop-in of another kind, empty or
// with a duplicated field, names in another case, unknown fields, JSON),
// nodeconfig.LoadKubeletConfigDir refuses exactly what the kubelet's own
// loadConfigFile and mergeKubeletConfigurations refuse, and otherwise
// gives every field pullguard reads the kubelet's value.
func TestKubeletDropInMergeParity(t *testing.T) {
	const head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	bases := []string{
		"", // no --config file
		head + "failCgroupV1: false\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\ncgroupDriver: systemd\n",
		head + "failCgroupV1: false\nmaxParallelImagePulls: 3\nregistryPullQPS: 0\n",
		head + "failCgroupV1: false\nserializeImagePulls: false\nfeatureGates: {ImageVolume: true, KubeletEnsureSecretPulledImages: true}\npreloadedImagesVerificationAllowlist: [\"a/*\"]\nimagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n",
		head + "failCgroupV1: false\nimageServiceEndpoint: unix:///run/containerd/containerd.sock\nruntimeRequestTimeout: 10m\n",
		head + "failCgroupV1: false\nfeatureGates: {KubeletEnsureSecretPulledImages: false}\n",
	}
	snippet := head + "imageServiceEndpoint: unix:///run/pullguard/pullguard.sock\nregistryPullQPS: 0\nserializeImagePulls: false\nmaxParallelImagePulls: 10\n"
	dropins := []map[string]string{
		{},
		{"50-pullguard.conf": snippet},
		{"10-a.conf": head + "registryBurst: 20\n", "20-b.conf": head + "registryBurst: 30\n"},
		{"20-b.conf": head + "registryBurst: 30\n", "9-a.conf": head + "registryBurst: 20\n"}, // "20" < "9"
		{"10-a.conf": head + "registryPullQPS: 0\n", "99-not.yaml": head + "registryPullQPS: 7\n", "README": "not a config"},
		{"10-sub/x.conf": head + "registryBurst: 40\n", "10-z.conf": head + "registryBurst: 50\n"},
		{"20-z.conf": head + "registryBurst: 40\n", "10-sub/x.conf": head + "registryBurst: 50\n"},
		{"10.conf": head + "featureGates: {KubeletEnsureSecretPulledImages: false}\n", "20.conf": head + "featureGates: {ImageVolume: true, GracefulNodeShutdown: true}\n"},
		{"10.conf": head + "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"b/*\", \"c/*\"]\n", "20.conf": head + "preloadedImagesVerificationAllowlist: [\"d/*\"]\n"},
		{"10.conf": head + "maxParallelImagePulls: 10\n"},
		{"10.conf": head + "serializeImagePulls: null\nmaxParallelImagePulls: 4\n"},
		{"10.conf": head + "registryPullQPS: null\nfeatureGates: null\n"},
		{"10.conf": head + "featureGates: {ImageVolume: null}\n"},
		{"10.conf": head + "registryPullQPS: fast\n"},
		{"10.conf": "registryPullQPS: 0\n"},
		{"10.conf": "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\nregistryPullQPS: 0\n"},
		{"10.conf": "apiVersion: v1\nkind: ConfigMap\n"},
		{"10.conf": ""},
		{"10.conf": head + "registryBurst: 3\nregistryBurst: 4\n"},
		{"10.conf": head + "RegistryBurst: 33\nSerializeImagePulls: false\n"},
		{"10.conf": head + "noSuchField: 1\nregistryBurst: 12\n"},
		{"10.conf": `{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "imageServiceEndpoint": "unix:///run/pullguard/pullguard.sock"}`},
		{"10.conf": head + "imageServiceEndpoint: \"\"\ncontainerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock\n"},
		{"10.conf": "not: [yaml\n"},
		{"10.conf": head + "runtimeRequestTimeout: 30s\n"},
	}
	root := t.TempDir()
	accepted, refused := 0, 0
	for i, base := range bases {
		for j, files := range dropins {
			t.Run(fmt.Sprintf("base%d/dropins%d", i, j), func(t *testing.T) {
				dir := filepath.Join(root, fmt.Sprintf("%d-%d", i, j))
				confDir := filepath.Join(dir, "conf.d")
				require.NoError(t, os.MkdirAll(confDir, 0o700))
				file := ""
				if base != "" {
					file = filepath.Join(dir, "config.yaml")
					require.NoError(t, os.WriteFile(file, []byte(base), 0o600))
				}
				for name, data := range files {
					p := filepath.Join(confDir, name)
					require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
					require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
				}
				kcfg, kerr := kubeletDropInMerge(t, file, confDir)
				pcfg, perr := nodeconfig.LoadKubeletConfigDir(file, confDir, true)
				if kerr != nil {
					refused++
					assert.Error(t, perr, "the kubelet refuses (%v), pullguard merges:\nbase: %s\ndrop-ins: %v", kerr, base, files)
					return
				}
				require.NoError(t, perr, "the kubelet merges, pullguard refuses:\nbase: %s\ndrop-ins: %v", base, files)
				accepted++
				assert.Equal(t, fieldsOf(kcfg), fieldsOf(pcfg.KubeletConfiguration), "base: %s\ndrop-ins: %v", base, files)
			})
		}
	}
	t.Logf("%d layouts: the kubelet merges %d, refuses %d", accepted+refused, accepted, refused)
	assert.Greater(t, accepted, len(bases)*10, "the table must exercise merged layouts")
	assert.Greater(t, refused, len(bases)*3, "the table must exercise refused layouts")
}
