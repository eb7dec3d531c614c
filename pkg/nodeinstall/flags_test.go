package nodeinstall_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

func TestReadFlagsFiles(t *testing.T) {
	tests := []struct {
		name  string
		files []string // contents; "" for a missing file
		want  map[string]nodeinstall.Flag
	}{
		{
			name:  "kubeadm's quoted line",
			files: []string{`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --registry-qps 3"` + "\n"},
			want: map[string]nodeinstall.Flag{
				"container-runtime-endpoint": {Value: "unix:///run/containerd/containerd.sock", File: "0", Line: 1},
				"registry-qps":               {Value: "3", File: "0", Line: 1},
			},
		},
		{
			name:  "a boolean flag alone, comments and other variables skipped",
			files: []string{"# KUBELET_EXTRA_ARGS=--registry-qps=1\nPATH=/bin\nexport KUBELET_EXTRA_ARGS='--serialize-image-pulls --node-labels=a=b'\n"},
			want: map[string]nodeinstall.Flag{
				"serialize-image-pulls": {Value: "true", File: "0", Line: 3},
				"node-labels":           {Value: "a=b", File: "0", Line: 3},
			},
		},
		{
			name:  "the later file wins, a missing one is skipped",
			files: []string{"KUBELET_KUBEADM_ARGS=--registry-qps=5\n", "", "\nKUBELET_EXTRA_ARGS=--registry-qps=0\n"},
			want:  map[string]nodeinstall.Flag{"registry-qps": {Value: "0", File: "2", Line: 2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var paths []string
			for i, content := range tt.files {
				p := filepath.Join(dir, string(rune('0'+i)))
				if content != "" {
					require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
				}
				paths = append(paths, p)
			}
			got, err := nodeinstall.ReadFlagsFiles(paths)
			require.NoError(t, err)
			want := map[string]nodeinstall.Flag{}
			for k, f := range tt.want {
				f.File = filepath.Join(dir, f.File)
				want[k] = f
			}
			assert.Equal(t, want, got)
		})
	}
}

func TestSplitAndExpand(t *testing.T) {
	env := map[string]string{"A": "--x=1  --y 2", "B": "two words"}
	tests := []struct {
		name string
		cmd  string
		want []nodeinstall.Word
	}{
		{
			name: "$VAR alone splits, ${VAR} in a word does not",
			cmd:  `-/usr/bin/kubelet $A --z=${B} "--q=a b" $$C`,
			want: []nodeinstall.Word{
				{Text: "/usr/bin/kubelet"}, {Text: "--x=1", Var: "A"}, {Text: "--y", Var: "A"}, {Text: "2", Var: "A"},
				{Text: "--z=two words", Var: "B"}, {Text: "--q=a b"}, {Text: "$C"},
			},
		},
		{
			name: "an unset variable is no word",
			cmd:  `/usr/bin/kubelet $NONE 'it''s'`,
			want: []nodeinstall.Word{{Text: "/usr/bin/kubelet"}, {Text: "its"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			words, err := nodeinstall.SplitCommandLine(tt.cmd)
			require.NoError(t, err)
			assert.Equal(t, tt.want, nodeinstall.Expand(words, env))
		})
	}
	_, err := nodeinstall.SplitCommandLine(`kubelet "--config=/x`)
	assert.ErrorContains(t, err, "unterminated")
}

// FuzzFlagsFile: the readers of flags files and command lines take any
// bytes without panicking, and every variable they find is named on its
// line.
func FuzzFlagsFile(f *testing.F) {
	f.Add([]byte("KUBELET_KUBEADM_ARGS=\"--config=/x --registry-qps 3\"\n# c\nexport KUBELET_EXTRA_ARGS='--a'\n"))
	f.Add([]byte("A=\"b\\\"c\"\nB='\n=\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := strings.Split(string(data), "\n")
		env := map[string]string{}
		for _, v := range nodeinstall.ParseEnvFile(data) {
			require.LessOrEqual(t, v.Line, len(lines))
			assert.Contains(t, lines[v.Line-1], v.Name)
			env[v.Name] = v.Value
			flags := map[string]nodeinstall.Flag{}
			nodeinstall.ParseFlags(strings.Fields(v.Value), "f", v.Line, flags)
			for name := range flags {
				assert.NotEmpty(t, name+"x")
			}
		}
		if words, err := nodeinstall.SplitCommandLine(string(data)); err == nil {
			nodeinstall.Expand(words, env)
		}
	})
}
