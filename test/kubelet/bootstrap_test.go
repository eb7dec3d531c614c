package kubelet

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	kubeadmscheme "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/scheme"
	kubeadmv1beta4 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	kubeadmvalidation "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/validation"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/patches"
	"sigs.k8s.io/yaml"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// bootstrapDir is the kubeadm recipe (deploy/bootstrap/kubeadm).
var bootstrapDir = filepath.Join("..", "..", "deploy", "bootstrap", "kubeadm")

// TestKubeadmJoinRecipe reads the kubeadm recipe with kubeadm v1.36's own
// code: join.yaml decoded strictly into its JoinConfiguration, defaulted
// and validated as `kubeadm join --config` does; the patch directory read
// by kubeadm's patch manager and applied, as at join, to the kubelet
// configuration kubeadm writes; the result accepted by the kubelet's
// decoding and validation; and its kubelet settings exactly those
// `pullguard install` writes, so that install, run after the join, plans
// no change to the kubelet's file and refuses nothing. No root, no
// binary: it runs with the module's unit tests.
func TestKubeadmJoinRecipe(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(bootstrapDir, "join.yaml"))
	require.NoError(t, err)
	var versioned kubeadmv1beta4.JoinConfiguration
	require.NoError(t, yaml.UnmarshalStrict(data, &versioned), "join.yaml")
	assert.Equal(t, kubeadmv1beta4.SchemeGroupVersion.String(), versioned.APIVersion)
	assert.Equal(t, "JoinConfiguration", versioned.Kind)
	kubeadmscheme.Scheme.Default(&versioned)
	var join kubeadmapi.JoinConfiguration
	require.NoError(t, kubeadmscheme.Scheme.Convert(&versioned, &join, nil))
	join.NodeRegistration.Name = "node-1" // kubeadm's dynamic default: the host's name
	assert.Empty(t, kubeadmvalidation.ValidateJoinConfiguration(&join).ToAggregate(), "kubeadm's validation of join.yaml")
	require.NotNil(t, join.Patches)
	const patchDir = "/etc/kubernetes/pullguard-patches"
	assert.Equal(t, patchDir, join.Patches.Directory)
	script, err := os.ReadFile(filepath.Join(bootstrapDir, "join.sh"))
	require.NoError(t, err)
	assert.Contains(t, string(script), "install -m 0644 patches/kubeletconfiguration+strategic.yaml "+patchDir+"/")

	pm, err := patches.GetPatchManagerForPath(filepath.Join(bootstrapDir, "patches"), patches.KnownTargets(), nil)
	require.NoError(t, err)
	base, err := os.ReadFile(filepath.Join(kubeadmRoot, "var/lib/kubelet/config.yaml"))
	require.NoError(t, err)
	target := &patches.PatchTarget{Name: patches.KubeletConfiguration, StrategicMergePatchObject: kubeletconfigv1beta1.KubeletConfiguration{}, Data: base}
	require.NoError(t, pm.ApplyPatchesToTarget(target))
	patched := target.Data
	require.NoError(t, kubeletVerdict(t, onThisHost(t, patched)), "the kubelet accepts the file kubeadm writes with the patch")

	var before, after map[string]any
	require.NoError(t, yaml.Unmarshal(base, &before))
	require.NoError(t, yaml.Unmarshal(patched, &after))
	changed := map[string]any{}
	for k, v := range after {
		if !assert.ObjectsAreEqual(before[k], v) {
			changed[k] = v
		}
	}
	assert.Equal(t, installSettings(t), changed, "the patch sets what pullguard install sets, and nothing else")

	// The node after the join: kubeadm's files, config.yaml as kubeadm
	// wrote it with the patch. install refuses nothing, and leaves the
	// kubelet's file as it is.
	root := t.TempDir()
	require.NoError(t, os.CopyFS(root, os.DirFS(kubeadmRoot)))
	require.NoError(t, os.WriteFile(filepath.Join(root, "var/lib/kubelet/config.yaml"), patched, 0o644))
	plan, err := nodeinstall.PlanInstall(nodeinstall.Options{Root: root, KubeletVersion: func(string) (string, error) { return "Kubernetes v1.36.3", nil }})
	require.NoError(t, err, "pullguard install after the join")
	dropIns := 0
	for _, c := range plan.Changes {
		t.Logf("install after the join: %s %s", c.Action, c.Path)
		if c.Path == "/var/lib/kubelet/config.yaml" {
			assert.Equal(t, nodeinstall.Unchanged, c.Action, "install leaves the file kubeadm wrote")
		}
		if strings.HasSuffix(c.Path, "/99-pullguard.conf") {
			dropIns++
			var dropIn map[string]any
			require.NoError(t, yaml.Unmarshal(c.Data, &dropIn))
			delete(dropIn, "apiVersion")
			delete(dropIn, "kind")
			assert.Equal(t, installSettings(t), dropIn, "install's drop-in holds the patch's settings")
		}
	}
	assert.Equal(t, 1, dropIns, "install gives the kubelet its settings in a --config-dir, which kubeadm upgrade does not rewrite")
}

// onThisHost is a kubelet file with failCgroupV1: false, unless it sets
// it: the kubelet's validation refuses every file on a cgroup v1 host
// otherwise (a check of the machine, not of the file).
func onThisHost(t *testing.T, data []byte) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(data, &m))
	if _, ok := m["failCgroupV1"]; !ok {
		m["failCgroupV1"] = false
	}
	out, err := yaml.Marshal(m)
	require.NoError(t, err)
	return out
}

// kubeadmRoot is a kubeadm node's files (kubelet 1.33 layout:
// kubelet.service, 10-kubeadm.conf, kubeadm-flags.env, config.yaml).
var kubeadmRoot = filepath.Join("..", "..", "pkg", "nodeinstall", "testdata", "kubeadm")

// installSettings are the kubelet settings `pullguard install` writes:
// deploy/kubelet/config-snippet.yaml but its containerRuntimeEndpoint
// (the kubelet keeps its own), as pkg/nodeinstall takes them.
func installSettings(t *testing.T) map[string]any {
	t.Helper()
	data, err := fs.ReadFile(os.DirFS(filepath.Join("..", "..", "deploy", "kubelet")), "config-snippet.yaml")
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(data, &m))
	for _, k := range []string{"apiVersion", "kind", "containerRuntimeEndpoint"} {
		delete(m, k)
	}
	require.Equal(t, "unix:///run/pullguard/pullguard.sock", m["imageServiceEndpoint"])
	return m
}

// TestKubeadmJoinRecipeRefusesAMistake: the checks above catch a patch
// that kubeadm would not apply or the kubelet would refuse.
func TestKubeadmJoinRecipeRefusesAMistake(t *testing.T) {
	for _, tc := range []struct{ name, file, patch, want string }{
		{name: "a patch file kubeadm does not know", file: "kubelet+strategic.yaml", patch: "registryPullQPS: 0\n", want: "ignored"},
		{name: "parallel pulls with serialized pulls", file: "kubeletconfiguration+strategic.yaml", patch: "serializeImagePulls: true\nmaxParallelImagePulls: 10\n", want: "maxParallelImagePulls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.patch), 0o644))
			var out strings.Builder
			pm, err := patches.GetPatchManagerForPath(dir, patches.KnownTargets(), &out)
			require.NoError(t, err)
			base, err := os.ReadFile(filepath.Join(kubeadmRoot, "var/lib/kubelet/config.yaml"))
			require.NoError(t, err)
			target := &patches.PatchTarget{Name: patches.KubeletConfiguration, StrategicMergePatchObject: kubeletconfigv1beta1.KubeletConfiguration{}, Data: base}
			require.NoError(t, pm.ApplyPatchesToTarget(target))
			if tc.want == "ignored" {
				assert.Contains(t, out.String(), "Ignored the following files")
				return
			}
			err = kubeletVerdict(t, onThisHost(t, target.Data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
