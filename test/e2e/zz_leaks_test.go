package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoCredentialLeaked runs last (files run in name order): no password
// the suite made up may appear in pullguard's state, in the registry's or
// containerd's logs, or in anything pullguard printed.
func TestNoCredentialLeaked(t *testing.T) {
	need(t)
	require.NotEmpty(t, secrets)
	var places []string
	haystacks := map[string][]byte{}
	for _, root := range roots {
		require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			haystacks[path] = data
			places = append(places, path)
			return err
		}))
	}
	haystacks["registry log"] = []byte(h.registry.log.all())
	haystacks["containerd log"] = []byte(h.containerd.log.all())
	for i, o := range outputs {
		haystacks["pullguard output "+string(rune('0'+i%10))] = append(haystacks["pullguard output "+string(rune('0'+i%10))], o...)
	}
	for name, data := range haystacks {
		for _, s := range secrets {
			assert.False(t, bytes.Contains(data, []byte(s)), "a test password appears in %s", name)
		}
	}
	t.Logf("scanned %d state files, 2 logs and %d outputs for %d passwords", len(places), len(outputs), len(secrets))
}
