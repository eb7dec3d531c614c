package podworkers_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/pkg/podworkers"
)

func TestReadKeepsALastLineOfBufferSize(t *testing.T) {
	head := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: registry.example/app:v1\n"
	const key, value = "    imagePullPolicy:", "Never"
	for _, n := range []int{4095, 4096, 4097, 8192, 3 * 4096} {
		t.Run(fmt.Sprintf("last line of %d bytes", n), func(t *testing.T) {
			doc := head + key + strings.Repeat(" ", n-len(key)-len(value)) + value
			require.Len(t, doc[strings.LastIndexByte(doc, '\n')+1:], n)
			m, err := podworkers.Load("pod.yaml", []byte(doc))
			require.NoError(t, err)
			require.Len(t, m.Pods, 1)
			assert.Equal(t, corev1.PullNever, m.Pods[0].Spec.Containers[0].ImagePullPolicy, "the last line is read")
		})
	}
}

func TestReadManifestsLimit(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte("# "+strings.Repeat("x", 2048)+"\n"), 0o600))

	_, err := podworkers.ReadManifests(podworkers.ReadOptions{MaxBytes: 1024}, big)
	require.ErrorIs(t, err, podworkers.ErrInputTooLarge)
	assert.Contains(t, err.Error(), big, "the error names the file")

	_, err = podworkers.ReadManifests(podworkers.ReadOptions{MaxBytes: 1024, Stdin: strings.NewReader(strings.Repeat("#", 1025))}, "-")
	require.ErrorIs(t, err, podworkers.ErrInputTooLarge)
	assert.Contains(t, err.Error(), "standard input")

	m, err := podworkers.ReadManifests(podworkers.ReadOptions{MaxBytes: 4096}, big)
	require.NoError(t, err, "at the limit it is read")
	assert.Empty(t, m.Pods)
}

func TestReadManifestsSources(t *testing.T) {
	dir := t.TempDir()
	pod := func(name string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + "}\nspec: {containers: [{name: c, image: a:1}]}\n"
	}
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	}
	write("b.yaml", pod("b"))
	write("a.yml", pod("a"))
	write("c.json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"c"},"spec":{"containers":[{"name":"c","image":"a:1"}]}}`)
	write("notes.txt", "not a manifest")
	write("sub/d.yaml", pod("d"))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o700))

	tests := []struct {
		name    string
		opts    podworkers.ReadOptions
		paths   []string
		want    []string
		wantErr string
	}{
		{name: "directory, lexical order, no subdirectories", paths: []string{dir}, want: []string{"default/a", "default/b", "default/c"}},
		{name: "recursive", opts: podworkers.ReadOptions{Recursive: true}, paths: []string{dir}, want: []string{"default/a", "default/b", "default/c", "default/d"}},
		{name: "stdin", opts: podworkers.ReadOptions{Stdin: strings.NewReader(pod("s"))}, paths: []string{"-"}, want: []string{"default/s"}},
		{name: "stdin and a file", opts: podworkers.ReadOptions{Stdin: strings.NewReader(pod("s"))}, paths: []string{"-", filepath.Join(dir, "sub/d.yaml")}, want: []string{"default/s", "default/d"}},
		{name: "stdin twice", opts: podworkers.ReadOptions{Stdin: strings.NewReader("")}, paths: []string{"-", "-"}, wantErr: "only once"},
		{name: "directory without manifests", paths: []string{empty}, wantErr: "no *.yaml"},
		{name: "missing", paths: []string{filepath.Join(dir, "nope")}, wantErr: "nope"},
		{name: "no paths", wantErr: "no manifest files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := podworkers.ReadManifests(tt.opts, tt.paths...)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, podNames(m))
		})
	}
}

func FuzzLoadLastLine(f *testing.F) {
	f.Add("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: a:1}]}", 4096)
	f.Fuzz(func(t *testing.T, doc string, pad int) {
		if pad < 0 || pad > 3*4096 {
			return
		}
		// A trailing comment never changes the objects: the result with
		// and without it, newline-terminated or not, is the same.
		base, errBase := podworkers.Load("f.yaml", []byte(doc+"\n"))
		padded, errPadded := podworkers.Load("f.yaml", []byte(doc+"\n#"+strings.Repeat("x", pad)))
		if (errBase == nil) != (errPadded == nil) {
			t.Fatalf("a trailing comment changed the outcome: %v vs %v", errBase, errPadded)
		}
		if errBase == nil {
			assert.Equal(t, podNames(base), podNames(padded))
		}
	})
}
