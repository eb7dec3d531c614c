package keyring_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/keyring"
)

// TestCachedNodeKeyringRereads: the files are read at the first look-up,
// kept for the kubelet's lifetime (an empty result too), and read again
// after it, so a rotated credential replaces the old one then.
func TestCachedNodeKeyringRereads(t *testing.T) {
	h := testHasher(t)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "config.json")
	config := func(user, pass string) []byte {
		return []byte(`{"auths":{"registry.example":{"auth":"` + b64(user+":"+pass) + `"}}}`)
	}
	var reports []error
	kr := keyring.CachedNodeKeyring(h, []string{path}, clk, func(err error) { reports = append(reports, err) })
	users := func() []string {
		t.Helper()
		got, err := kr.Lookup(context.Background(), "registry.example/app")
		require.NoError(t, err)
		var out []string
		for _, c := range got {
			out = append(out, c.Auth.Username)
		}
		return out
	}

	steps := []struct {
		name    string
		write   []byte
		advance time.Duration
		want    []string
	}{
		{name: "no file yet: empty, and kept", want: nil},
		{name: "file written within the lifetime: not seen yet", write: config("old", "pw-node-Hh6"), advance: keyring.NodeConfigLifetime - time.Nanosecond, want: nil},
		{name: "lifetime over: read", advance: time.Nanosecond, want: []string{"old"}},
		{name: "rotated within the lifetime: still the old one", write: config("new", "pw-s3cret-Qz8"), advance: time.Minute, want: []string{"old"}},
		{name: "lifetime over: the new one only", advance: keyring.NodeConfigLifetime, want: []string{"new"}},
		{name: "corrupted: passed over, reported", write: []byte(`{"auths":`), advance: keyring.NodeConfigLifetime, want: nil},
	}
	for _, s := range steps {
		if s.write != nil {
			writeFile(t, path, s.write)
		}
		clk.SetTime(clk.Now().Add(s.advance))
		assert.Equal(t, s.want, users(), s.name)
	}
	require.Len(t, reports, 1, "one report for the one read that passed over a file")
	assert.ErrorIs(t, reports[0], keyring.ErrInvalidDockerConfig)
	assertNoSecrets(t, reports[0].Error())
}

// TestCachedNodeKeyringNextFile: a file that is corrupt, too large or not
// a file is passed over for the next one, as the kubelet does.
func TestCachedNodeKeyringNextFile(t *testing.T) {
	good := []byte(`{"auths":{"registry.example":{"username":"node","password":"pw-node-Hh6"}}}`)
	huge := make([]byte, 10<<20+1)
	for i := range huge {
		huge[i] = ' '
	}
	tests := []struct {
		name  string
		first func(t *testing.T, path string)
	}{
		{name: "corrupt", first: func(t *testing.T, p string) {
			writeFile(t, p, []byte(`{"auths":{"registry.example":{"password":"pw-node-Hh6"`))
		}},
		{name: "larger than the bound", first: func(t *testing.T, p string) { writeFile(t, p, huge) }},
		{name: "a directory", first: func(t *testing.T, p string) { writeFile(t, filepath.Join(p, "x"), nil) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			first := filepath.Join(dir, "root", "config.json")
			tc.first(t, first)
			second := writeFile(t, filepath.Join(dir, "home", ".docker", "config.json"), good)
			var reports []error
			kr := keyring.CachedNodeKeyring(testHasher(t), []string{first, second}, nil, func(err error) { reports = append(reports, err) })
			got, err := kr.Lookup(context.Background(), "registry.example/app")
			require.NoError(t, err)
			require.Len(t, got, 1)
			assert.Equal(t, second, got[0].Source.Name)
			require.Len(t, reports, 1)
			var ferr *keyring.ConfigFileError
			require.ErrorAs(t, reports[0], &ferr)
			assert.Equal(t, first, ferr.Path)
			assertNoSecrets(t, reports[0].Error())
		})
	}
}
