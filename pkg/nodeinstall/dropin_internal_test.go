package nodeinstall

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/nodeconfig"
)

// The drop-ins install reads are the kubelet's, in the kubelet's order:
// the order nodeconfig.LoadKubeletConfigDir merges them in.
func TestDropInFilesInTheKubeletsOrder(t *testing.T) {
	root := t.TempDir()
	dir := "/etc/kubernetes/kubelet.conf.d"
	files := map[string]string{
		"a.conf":      "imageServiceEndpoint: unix:///run/pullguard/pullguard.sock\n",
		"a/x.conf":    "imageServiceEndpoint: unix:///run/other.sock\n",
		"10-b.conf":   "registryPullQPS: 3\n",
		"b/c/d.conf":  "maxPods: 20\n",
		"notes.txt":   "not read\n",
		"z.conf.orig": "not read\n",
	}
	for name, body := range files {
		p := filepath.Join(root, dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o644))
	}
	got, err := dropInFiles(root, dir)
	require.NoError(t, err)
	kc, err := nodeconfig.LoadKubeletConfigDir("", filepath.Join(root, dir), true)
	require.NoError(t, err)
	var want []string
	for _, f := range kc.Files {
		rel, err := filepath.Rel(root, f)
		require.NoError(t, err)
		want = append(want, "/"+rel)
	}
	assert.Equal(t, want, got)
	assert.Equal(t, []string{dir + "/10-b.conf", dir + "/a/x.conf", dir + "/a.conf", dir + "/b/c/d.conf"}, got,
		"a directory's files in its name's place, as the kubelet walks them")
	assert.Equal(t, "unix:///run/pullguard/pullguard.sock", kc.ImageServiceEndpoint, "a.conf, merged last, wins")
}

// Only the fields the kubelet defaults when unset lose their meaning in
// the JSON a kubelet with a --config-dir merges over.
func TestEmptiedByJSON(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{name: "nothing empty", body: "maxPods: 20\nenforceNodeAllocatable: [none]\n"},
		{name: "an empty list the kubelet defaults", body: "enforceNodeAllocatable: []\n", want: []string{"enforceNodeAllocatable"}},
		{name: "an empty map the kubelet defaults", body: "evictionHard: {}\n", want: []string{"evictionHard"}},
		{name: "both", body: "evictionHard: {}\nenforceNodeAllocatable: []\n", want: []string{"enforceNodeAllocatable", "evictionHard"}},
		{name: "empty maps and lists nil means alike", body: "evictionSoft: {}\nevictionSoftGracePeriod: {}\nclusterDNS: []\nsystemReserved: {}\nallowedUnsafeSysctls: []\n"},
		{name: "unset", body: "cgroupsPerQOS: false\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.yaml")
			require.NoError(t, os.WriteFile(p, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+tt.body), 0o644))
			cfg, _, err := nodeconfig.LoadKubeletConfig(p)
			require.NoError(t, err)
			assert.Equal(t, tt.want, emptiedByJSON(cfg))
		})
	}
}
