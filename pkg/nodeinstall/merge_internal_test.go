package nodeinstall

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzMerge: whatever kubelet file parses, its merge either is refused or
// parses again with serve's socket as its image service, and a YAML file
// keeps every line that held no field the merge sets.
func FuzzMerge(f *testing.F) {
	f.Add([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n# c\nregistryPullQPS: 5 # x\nmaxPods: 10\n"))
	f.Add([]byte("{\n  \"kind\": \"KubeletConfiguration\",\n  \"serializeImagePulls\": true\n}\n"))
	f.Add([]byte("registryPullQPS:\nserializeImagePulls:   # c\nkind: K\n"))
	f.Add([]byte("imageServiceEndpoint: 'unix:///run/pullguard/pullguard.sock'\nserializeImagePulls: \"true\"\n"))
	settings, err := kubeletSettings(defaultServeSocket)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseConfig("/f", data)
		if err != nil {
			return
		}
		out, err := c.merge(settings)
		if err != nil {
			return
		}
		again, err := parseConfig("/f", out)
		require.NoError(t, err, "the merge of %q:\n%s", data, out)
		got, _ := again.str("imageServiceEndpoint")
		assert.Equal(t, defaultServeSocket, got, "the merge of %q:\n%s", data, out)
		if c.json || c.root().Style != 0 {
			return
		}
		set := map[int]bool{}
		for _, k := range []string{"imageServiceEndpoint", "registryPullQPS", "serializeImagePulls", "maxParallelImagePulls"} {
			if n := c.field(k); n != nil {
				set[n.Line] = true
			}
		}
		for i, line := range strings.Split(string(data), "\n") {
			if !set[i+1] {
				assert.Contains(t, string(out), line, "line %d kept", i+1)
			}
		}
	})
}
