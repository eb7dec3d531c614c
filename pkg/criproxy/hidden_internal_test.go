package criproxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestHiddenKeyMemo: the memoized key is the normalized name for every
// spelling, the memo stays bounded, and over-long names are not kept.
func TestHiddenKeyMemo(t *testing.T) {
	h := newHiddenSet(time.Minute)
	for _, name := range []string{
		"alpine",
		"docker.io/library/alpine:latest",
		"registry.example:5000/team-a/app:v1",
		"registry.example:5000/team-a/app@sha256:" + strings.Repeat("a", 64),
		"sha256:" + strings.Repeat("b", 64),
		"not a name",
		"",
	} {
		t.Run(name, func(t *testing.T) {
			h.mu.Lock()
			defer h.mu.Unlock()
			assert.Equal(t, hiddenKey(name), h.key(name), "first")
			assert.Equal(t, hiddenKey(name), h.key(name), "memoized")
		})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Equal(t, h.key("alpine"), h.key("docker.io/library/alpine:latest"), "one image, one key")
	for i := range maxHidden + 10 {
		h.key(fmt.Sprintf("registry.example/app%d:v1", i))
	}
	assert.LessOrEqual(t, len(h.keys), maxHidden, "bounded")
	long := "registry.example/" + strings.Repeat("a", maxMemoName) + ":v1"
	assert.Equal(t, hiddenKey(long), h.key(long))
	assert.NotContains(t, h.keys, long, "an over-long name is not kept")
}
