package boundedread

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

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

// endless is an input that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

func TestNewReader(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      io.Reader
		max     int64
		want    string
		tooLong bool
	}{
		{name: "empty", in: strings.NewReader(""), max: 4},
		{name: "under the bound", in: strings.NewReader("ab"), max: 4, want: "ab"},
		{name: "exactly the bound", in: strings.NewReader("abcd"), max: 4, want: "abcd"},
		{name: "one byte over", in: strings.NewReader("abcde"), max: 4, tooLong: true},
		{name: "a byte at a time, over", in: iotest.OneByteReader(strings.NewReader("abcde")), max: 4, tooLong: true},
		{name: "zero bound, one byte", in: strings.NewReader("a"), max: 0, tooLong: true},
		{name: "an endless input", in: endless{}, max: 1 << 10, tooLong: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.in, tc.max)
			got, err := io.ReadAll(r)
			if tc.tooLong {
				require.ErrorIs(t, err, ErrTooLarge)
				assert.LessOrEqual(t, int64(len(got)), tc.max, "never more than the bound")
				_, err = r.Read(make([]byte, 8))
				assert.ErrorIs(t, err, ErrTooLarge, "the error stays")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
		})
	}
}
