package criproxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pullguard/pullguard/pkg/credential"
)

func TestRecordSource(t *testing.T) {
	var hash credential.Hash
	hash[0] = 0xab
	src := recordSource("team-a", hash)
	assert.Equal(t, credential.SourceSecret, src.Kind)
	assert.False(t, src.NodeAccessible(), "a CRI credential is never node-wide")
	assert.Equal(t, "team-a", src.Namespace)
	assert.Equal(t, SourceNamePrefix+hash.String(), src.Name)
	for _, bad := range []string{"", "Not_A_Namespace", strings.Repeat("a", 64), "a/b"} {
		assert.Equal(t, NoNamespace, recordSource(bad, hash).Namespace, "%q", bad)
	}
}
