package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadKubeletFlags(t *testing.T) {
	tests := []struct {
		name  string
		files []string // contents; "" for a missing file
		want  map[string]kubeletFlag
	}{
		{
			name:  "kubeadm's quoted line",
			files: []string{`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --registry-qps 3"` + "\n"},
			want: map[string]kubeletFlag{
				"container-runtime-endpoint": {value: "unix:///run/containerd/containerd.sock", file: "0", line: 1},
				"registry-qps":               {value: "3", file: "0", line: 1},
			},
		},
		{
			name:  "a boolean flag alone, comments and other variables skipped",
			files: []string{"# KUBELET_EXTRA_ARGS=--registry-qps=1\nPATH=/bin\nexport KUBELET_EXTRA_ARGS='--serialize-image-pulls --node-labels=a=b'\n"},
			want: map[string]kubeletFlag{
				"serialize-image-pulls": {value: "true", file: "0", line: 3},
				"node-labels":           {value: "a=b", file: "0", line: 3},
			},
		},
		{
			name:  "the later file wins, a missing one is skipped",
			files: []string{"KUBELET_KUBEADM_ARGS=--registry-qps=5\n", "", "\nKUBELET_EXTRA_ARGS=--registry-qps=0\n"},
			want:  map[string]kubeletFlag{"registry-qps": {value: "0", file: "2", line: 2}},
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
			got, err := readKubeletFlags(paths)
			require.NoError(t, err)
			want := map[string]kubeletFlag{}
			for k, f := range tt.want {
				f.file = filepath.Join(dir, f.file)
				want[k] = f
			}
			assert.Equal(t, want, got)
		})
	}
}
