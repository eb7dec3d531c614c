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

func TestAddExtraArg(t *testing.T) {
	const arg = "--config-dir=/etc/kubernetes/kubelet.conf.d"
	tests := []struct {
		name, file, want string
	}{
		{name: "no file", file: "", want: "KUBELET_EXTRA_ARGS=" + arg + "\n"},
		{name: "empty value", file: "KUBELET_EXTRA_ARGS=\n", want: "KUBELET_EXTRA_ARGS=" + arg + "\n"},
		{name: "double quotes", file: "# ours\nKUBELET_EXTRA_ARGS=\"--v=2 --node-labels=a=b\"\nOTHER=1\n", want: "# ours\nKUBELET_EXTRA_ARGS=\"--v=2 --node-labels=a=b " + arg + "\"\nOTHER=1\n"},
		{name: "empty quotes", file: "KUBELET_EXTRA_ARGS=''", want: "KUBELET_EXTRA_ARGS='" + arg + "'"},
		{name: "plain, the last line wins", file: "KUBELET_EXTRA_ARGS=--v=1\nKUBELET_EXTRA_ARGS=--v=2\r\n", want: "KUBELET_EXTRA_ARGS=--v=1\nKUBELET_EXTRA_ARGS=--v=2 " + arg + "\r\n"},
		{name: "no such variable", file: "OTHER=1", want: "OTHER=1\nKUBELET_EXTRA_ARGS=" + arg + "\n"},
		// Quotes that close inside the value are not the value's: the
		// argument goes after them, not into the last flag's value.
		{name: "a quoted flag value last", file: "KUBELET_EXTRA_ARGS=--node-labels=\"a=b\"\n", want: "KUBELET_EXTRA_ARGS=--node-labels=\"a=b\" " + arg + "\n"},
		{name: "an empty quoted flag value last", file: "KUBELET_EXTRA_ARGS=--node-labels=''\n", want: "KUBELET_EXTRA_ARGS=--node-labels='' " + arg + "\n"},
		{name: "two quoted words", file: "KUBELET_EXTRA_ARGS=\"--v=2\" \"--max-pods=10\"\n", want: "KUBELET_EXTRA_ARGS=\"--v=2\" \"--max-pods=10\" " + arg + "\n"},
		{name: "escaped quotes inside", file: "export KUBELET_EXTRA_ARGS=\"--node-labels=\\\"a\\\"\"\n", want: "export KUBELET_EXTRA_ARGS=\"--node-labels=\\\"a\\\" " + arg + "\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(addExtraArg([]byte(tt.file), arg))
			assert.Equal(t, tt.want, got)
			vars := ParseEnvFile([]byte(got))
			flags := map[string]Flag{}
			for _, v := range vars {
				if v.Name == "KUBELET_EXTRA_ARGS" {
					ParseFlags(strings.Fields(v.Value), "f", v.Line, flags)
				}
			}
			assert.Equal(t, "/etc/kubernetes/kubelet.conf.d", flags["config-dir"].Value)
		})
	}
}
