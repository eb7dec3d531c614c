package main_test

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docBlocks returns the fenced blocks of a Markdown file: the shell
// blocks marked with a "<!-- docs-test: NAME -->" line, by name, and the
// YAML blocks whose first line is "# FILE", by file name.
func docBlocks(t *testing.T, path string) (tests map[string][]string, files map[string]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	tests, files = map[string][]string{}, map[string]string{}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if name, ok := strings.CutPrefix(line, "<!-- docs-test: "); ok {
			name = strings.TrimSuffix(name, " -->")
			require.Less(t, i+1, len(lines))
			require.Equal(t, "```sh", strings.TrimSpace(lines[i+1]), "%s: a docs-test marker must precede a sh block", path)
			for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				if cmd := strings.TrimSpace(lines[i]); cmd != "" {
					tests[name] = append(tests[name], cmd)
				}
			}
			continue
		}
		if line == "```yaml" && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "# ") {
			name := strings.TrimPrefix(lines[i+1], "# ")
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				body = append(body, lines[i])
			}
			files[name] = strings.Join(body, "\n") + "\n"
		}
	}
	return tests, files
}

// TestDocsExamples runs the README's quick start and the marked examples of
// docs/operations.md against the built binary, in a scratch directory
// with the README's access.yaml and pods.yaml, and the README's registry
// on a free port in place of 127.0.0.1:5000.
func TestDocsExamples(t *testing.T) {
	readme, files := docBlocks(t, "../../README.md")
	ops, _ := docBlocks(t, "../../docs/operations.md")
	require.Contains(t, readme, "quickstart")
	require.Contains(t, readme, "own-pods")
	require.Contains(t, files, "access.yaml")
	require.Contains(t, files, "pods.yaml")
	for _, name := range []string{"ops-inputs", "ops-output", "ops-logs", "ops-records", "ops-metrics"} {
		require.Contains(t, ops, name)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	dir := t.TempDir()
	subst := func(s string) string {
		s = strings.ReplaceAll(s, "127.0.0.1:5000", addr)
		if os.Geteuid() == 0 {
			// As root the default root directory is /var/lib/pullguard,
			// the node's own: the README's commands that use the default
			// get a scratch one instead (XDG_STATE_HOME stands in for it
			// when not root).
			def := filepath.Join(dir, "default-root")
			for _, sub := range []string{"run", "records"} {
				if !strings.Contains(s, "--root-dir") {
					s = strings.ReplaceAll(s, "./pullguard "+sub+" ", "./pullguard "+sub+" --root-dir "+def+" ")
				}
			}
		}
		return s
	}
	require.NoError(t, os.Symlink(binary, filepath.Join(dir, "pullguard")))
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(subst(body)), 0o600))
	}
	env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(dir, "xdg"), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))

	run := func(t *testing.T, line string) string {
		t.Helper()
		if strings.HasPrefix(line, "go build ") {
			return "" // the test built the binary, linked as ./pullguard
		}
		if bg, ok := strings.CutSuffix(strings.TrimSpace(strings.Split(line, "#")[0]), "&"); ok {
			cmd := exec.Command("bash", "-c", "exec "+subst(bg))
			cmd.Dir, cmd.Env = dir, env
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				_ = cmd.Wait()
			})
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "Serving") {
					go func() { _, _ = bufio.NewReader(stdout).WriteTo(new(bytes.Buffer)) }()
					return ""
				}
			}
			t.Fatalf("%s: never served", line)
		}
		cmd := exec.Command("bash", "-c", subst(line))
		cmd.Dir, cmd.Env = dir, env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		require.NoError(t, cmd.Run(), "%s\n%s%s", line, out.String(), errOut.String())
		assert.NotContains(t, out.String()+errOut.String(), "alice-secret", "a password was printed")
		return out.String()
	}
	outputs := map[string]string{}
	for _, name := range []string{"quickstart", "own-pods"} {
		for _, line := range readme[name] {
			outputs[line] = run(t, line)
		}
	}
	assert.Contains(t, outputs["./pullguard demo                                   # the story, in a few seconds"], "Every outcome is as expected.")
	assert.Contains(t, outputs["./pullguard run -f pods.yaml                        # table and events: intruder refused by the registry"], "refused by the registry")
	assert.Contains(t, outputs["./pullguard records                                 # what the node remembers, and the store's health"], "Store: healthy")

	for _, name := range []string{"ops-inputs", "ops-output", "ops-logs", "ops-records", "ops-metrics"} {
		t.Run(name, func(t *testing.T) {
			for _, line := range ops[name] {
				run(t, line)
			}
		})
	}
}
