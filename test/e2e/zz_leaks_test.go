package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/leak"
)

// TestNoCredentialLeaked runs last (files run in name order): no password
// the suite made up may appear in pullguard's state, in the registry's or
// containerd's logs, or in anything pullguard printed, in any encoding.
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
	texts := map[string]string{}
	for name, data := range haystacks {
		texts[name] = string(data)
	}
	// Every form: plain, base64 (alone, in user:password, in a docker
	// config), JSON- and URL-escaped.
	for _, f := range leak.Scan(texts, secrets...) {
		assert.Fail(t, "a test password appears", "in %s, as %q", f.Where, f.Form)
	}
	t.Logf("scanned %d state files, 2 logs and %d outputs for %d passwords", len(places), len(outputs), len(secrets))
}
