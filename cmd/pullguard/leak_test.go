package main_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRunRejectsManifestsWithoutEchoingThem: documents the decoders reject
// make `pullguard run` fail with the file and the document named, and
// nothing of the Secret's password printed in any form (pullguard checks
// every output for every form).
func TestRunRejectsManifestsWithoutEchoingThem(t *testing.T) {
	pw := passwords["alice"]
	docs := map[string]string{
		"no-kind.yaml":       "apiVersion: v1\nmetadata: {name: s, namespace: team-a}\nstringData: {.dockerconfigjson: '{\"auths\":{\"r\":{\"password\":\"" + pw + "\"}}}'}\n",
		"no-apiversion.yaml": "kind: Secret\nmetadata: {name: s}\nstringData: {pw: '" + pw + "'}\n",
		"bad-type.yaml":      "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nimmutable: '" + pw + "'\n",
		"bad-yaml.yaml":      "apiVersion: v1\nkind: Secret\nstringData: {pw: '" + pw + "', x: [\n",
	}
	dir := t.TempDir()
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			res := pullguard(t, "run", "-f", path, "--root-dir", filepath.Join(dir, "root-"+name))
			assert.NotEqual(t, 0, res.code)
			assert.Contains(t, res.stderr, name)
			assert.Contains(t, res.stderr, "document 1")
		})
	}
}
