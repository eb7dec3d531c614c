package durabletest

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/durable"
)

// List returns the names in dir: the files (and directories) a reader
// takes for what they are, and the temporary files of package durable
// (durable.IsTemp), which no reader should.
func List(t testing.TB, dir string) (files, temporary []string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, de := range des {
		if durable.IsTemp(de.Name()) {
			temporary = append(temporary, de.Name())
		} else {
			files = append(files, de.Name())
		}
	}
	return files, temporary
}
