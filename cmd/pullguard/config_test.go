package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const kubeletConfigHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	good := write("good.yaml", kubeletConfigHeader+"imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [ubuntu]\n")
	badPolicy := write("bad-policy.yaml", kubeletConfigHeader+"imagePullCredentialsVerificationPolicy: Sometimes\n")
	badYAML := write("bad-yaml.yaml", kubeletConfigHeader+"registryBurst: [\n")
	missing := filepath.Join(dir, "missing.yaml")

	for _, tc := range []struct {
		name     string
		files    []string
		code     int
		contains []string
	}{
		{name: "an accepted file", files: []string{good}, code: 0, contains: []string{good + ": ok\n"}},
		{name: "an unknown policy", files: []string{badPolicy}, code: 1, contains: []string{badPolicy + ": refused: ", "imagePullCredentialsVerificationPolicy"}},
		{name: "a file that is not YAML", files: []string{badYAML}, code: 1, contains: []string{badYAML + ": refused: "}},
		{name: "a missing file", files: []string{missing}, code: 1, contains: []string{missing + ": refused: "}},
		{name: "one refused among accepted ones", files: []string{good, badPolicy, good}, code: 1, contains: []string{good + ": ok\n", badPolicy + ": refused: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := pullguard(t, append([]string{"config", "check"}, tc.files...)...)
			assert.Equal(t, tc.code, r.code, "stderr: %s", r.stderr)
			for _, s := range tc.contains {
				assert.Contains(t, r.stdout, s)
			}
			assert.Len(t, splitLines(r.stdout), len(tc.files), "one line per file")

			r = pullguard(t, append([]string{"config", "check", "-o", "json"}, tc.files...)...)
			assert.Equal(t, tc.code, r.code)
			var doc struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Files      []struct {
					File     string `json:"file"`
					Accepted bool   `json:"accepted"`
					Error    string `json:"error"`
				} `json:"files"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), r.stdout)
			assert.Equal(t, "pullguard.io/v1", doc.APIVersion)
			assert.Equal(t, "ConfigCheck", doc.Kind)
			require.Len(t, doc.Files, len(tc.files))
			for i, f := range doc.Files {
				assert.Equal(t, tc.files[i], f.File)
				assert.Equal(t, tc.files[i] == good, f.Accepted, f.File)
				assert.Equal(t, f.Accepted, f.Error == "", "an error exactly when refused: %+v", f)
			}
		})
	}

	t.Run("no file", func(t *testing.T) {
		r := pullguard(t, "config", "check")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "requires at least 1 arg")
	})
	t.Run("an unknown output format", func(t *testing.T) {
		r := pullguard(t, "config", "check", "-o", "yaml", good)
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "--output must be table or json")
	})
}

// splitLines returns the non-empty lines of s.
func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
