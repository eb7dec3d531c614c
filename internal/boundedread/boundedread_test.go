package boundedread

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		max     int64
		tooLong bool
	}{
		{name: "empty", in: "", max: 4},
		{name: "exactly the bound", in: "abcd", max: 4},
		{name: "one byte over", in: "abcde", max: 4, tooLong: true},
		{name: "far over", in: strings.Repeat("x", 1<<16), max: 4, tooLong: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(strings.NewReader(tc.in), tc.max)
			if tc.tooLong {
				require.ErrorIs(t, err, ErrTooLarge)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.in, string(got))
		})
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte("12345"), 0o600))
	got, err := ReadFile(path, 5)
	require.NoError(t, err)
	assert.Equal(t, "12345", string(got))
	_, err = ReadFile(path, 4)
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = ReadFile(filepath.Join(t.TempDir(), "missing"), 4)
	require.ErrorIs(t, err, os.ErrNotExist)
}
