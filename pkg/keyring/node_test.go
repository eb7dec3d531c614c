package keyring_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

func writeFile(t testing.TB, path string, data []byte) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

func TestNodeKeyringFirstFileWins(t *testing.T) {
	h := testHasher(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "root", "config.json")
	malformed := writeFile(t, filepath.Join(dir, "wd", "config.json"), []byte(`{"auths":{"registry.example":{"password":"pw-node-Hh6"`))
	good := writeFile(t, filepath.Join(dir, "home", ".docker", "config.json"), fixture(t, "config.json"))
	later := writeFile(t, filepath.Join(dir, "home", ".dockercfg"), fixture(t, "dockercfg"))

	kr, err := keyring.NodeKeyring(h, []string{"", missing, malformed, good, later})
	require.Error(t, err, "the malformed file is reported")
	assert.ErrorIs(t, err, keyring.ErrInvalidDockerConfig)
	var ferr *keyring.ConfigFileError
	require.ErrorAs(t, err, &ferr)
	assert.Equal(t, malformed, ferr.Path)
	assertNoSecrets(t, err.Error())

	got, lerr := kr.Lookup(context.Background(), "registry.example/app")
	require.NoError(t, lerr)
	src := credential.Source{Kind: credential.SourceNode, Name: good}
	assert.Equal(t, []summary{
		{Registry: "registry.example", Source: src, User: "team-a"},
		{Registry: "registry.example", Source: src, User: "wild"},
	}, summarize(got), "only the first valid file is used")
	assertHashes(t, h, got)
	assert.True(t, got[0].Source.NodeAccessible())
}

func TestNodeKeyringLegacyFormatByName(t *testing.T) {
	h := testHasher(t)
	path := writeFile(t, filepath.Join(t.TempDir(), ".dockercfg"), fixture(t, "dockercfg"))
	kr, err := keyring.NodeKeyring(h, []string{path})
	require.NoError(t, err)

	got, lerr := kr.Lookup(context.Background(), "legacy.example/app")
	require.NoError(t, lerr)
	src := credential.Source{Kind: credential.SourceNode, Name: path}
	assert.Equal(t, []summary{{Registry: "legacy.example", Source: src, User: "old"}}, summarize(got),
		`"http://legacy.example/v2/" is the host alone`)
}

func TestNodeKeyringNoFile(t *testing.T) {
	kr, err := keyring.NodeKeyring(testHasher(t), []string{filepath.Join(t.TempDir(), "config.json")})
	require.NoError(t, err)
	got, lerr := kr.Lookup(context.Background(), "alpine")
	require.NoError(t, lerr)
	assert.Empty(t, got)
}

func TestNodeKeyringUnreadableAndInvalidEntries(t *testing.T) {
	h := testHasher(t)
	dir := t.TempDir()
	isDir := filepath.Join(dir, "dir", "config.json")
	require.NoError(t, os.MkdirAll(isDir, 0o755))
	partly := writeFile(t, filepath.Join(dir, "partly", "config.json"), []byte(`{"auths":{
		"registry.example:x":{"username":"bad-port","password":"pw-node-Hh6"},
		"registry.example":{"username":"kept","password":"pw-node-Hh6"}}}`))

	kr, err := keyring.NodeKeyring(h, []string{isDir, partly})
	require.Error(t, err)
	var errs interface{ Unwrap() []error }
	require.True(t, errors.As(err, &errs))
	require.Len(t, errs.Unwrap(), 2)
	var ferr *keyring.ConfigFileError
	require.ErrorAs(t, errs.Unwrap()[0], &ferr)
	assert.Equal(t, isDir, ferr.Path)
	require.ErrorAs(t, errs.Unwrap()[1], &ferr)
	assert.Equal(t, partly, ferr.Path)
	assert.ErrorIs(t, errs.Unwrap()[1], keyring.ErrInvalidPattern)
	assertNoSecrets(t, err.Error())

	got, lerr := kr.Lookup(context.Background(), "registry.example/app")
	require.NoError(t, lerr)
	require.Len(t, got, 1)
	assert.Equal(t, "kept", got[0].Auth.Username)
}

func TestNodeKeyringTooLarge(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "config.json"), make([]byte, 10<<20+1))
	_, err := keyring.NodeKeyring(testHasher(t), []string{path})
	assert.ErrorIs(t, err, keyring.ErrInvalidDockerConfig)
}

func TestDefaultNodeConfigFiles(t *testing.T) {
	home := t.TempDir()
	wd := t.TempDir()
	t.Setenv("HOME", home)
	t.Chdir(wd)
	wd, err := os.Getwd() // resolved, as the function sees it
	require.NoError(t, err)

	tests := []struct {
		name    string
		rootDir string
		want    []string
	}{
		{
			name:    "kubelet order",
			rootDir: "/var/lib/kubelet",
			want: []string{
				"/var/lib/kubelet/config.json",
				filepath.Join(wd, "config.json"),
				filepath.Join(home, ".docker", "config.json"),
				"/.docker/config.json",
				"/var/lib/kubelet/.dockercfg",
				filepath.Join(wd, ".dockercfg"),
				filepath.Join(home, ".dockercfg"),
				"/.dockercfg",
			},
		},
		{
			name:    "no root dir",
			rootDir: "",
			want: []string{
				filepath.Join(wd, "config.json"),
				filepath.Join(home, ".docker", "config.json"),
				"/.docker/config.json",
				filepath.Join(wd, ".dockercfg"),
				filepath.Join(home, ".dockercfg"),
				"/.dockercfg",
			},
		},
		{
			name:    "root dir equal to the working dir is listed once",
			rootDir: wd,
			want: []string{
				filepath.Join(wd, "config.json"),
				filepath.Join(home, ".docker", "config.json"),
				"/.docker/config.json",
				filepath.Join(wd, ".dockercfg"),
				filepath.Join(home, ".dockercfg"),
				"/.dockercfg",
			},
		},
		{
			name:    "relative root dir: made absolute, as the kubelet's filepath.Abs",
			rootDir: "state/kubelet",
			want: []string{
				filepath.Join(wd, "state", "kubelet", "config.json"),
				filepath.Join(wd, "config.json"),
				filepath.Join(home, ".docker", "config.json"),
				"/.docker/config.json",
				filepath.Join(wd, "state", "kubelet", ".dockercfg"),
				filepath.Join(wd, ".dockercfg"),
				filepath.Join(home, ".dockercfg"),
				"/.dockercfg",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, keyring.DefaultNodeConfigFiles(tt.rootDir))
		})
	}

	// HOME unset: the kubelet's homeDirPath is "", so it searches
	// ".docker/config.json" and ".dockercfg", made absolute: in the
	// working directory.
	t.Setenv("HOME", "")
	assert.Equal(t, []string{
		"/var/lib/kubelet/config.json",
		filepath.Join(wd, "config.json"),
		filepath.Join(wd, ".docker", "config.json"),
		"/.docker/config.json",
		"/var/lib/kubelet/.dockercfg",
		filepath.Join(wd, ".dockercfg"),
		"/.dockercfg",
	}, keyring.DefaultNodeConfigFiles("/var/lib/kubelet"))
}

func TestNodeConfigFiles(t *testing.T) {
	tests := []struct {
		name                   string
		rootDir, home, workDir string
		want                   []string
	}{
		{
			name:    "no HOME (kubeadm's unit under systemd): .docker relative to the working directory /",
			rootDir: "/var/lib/kubelet", home: "", workDir: "/",
			want: []string{
				"/var/lib/kubelet/config.json",
				"/config.json",
				"/.docker/config.json",
				"/var/lib/kubelet/.dockercfg",
				"/.dockercfg",
			},
		},
		{
			name:    "no HOME, another working directory",
			rootDir: "/var/lib/kubelet", home: "", workDir: "/srv/kubelet",
			want: []string{
				"/var/lib/kubelet/config.json",
				"/srv/kubelet/config.json",
				"/srv/kubelet/.docker/config.json",
				"/.docker/config.json",
				"/var/lib/kubelet/.dockercfg",
				"/srv/kubelet/.dockercfg",
				"/.dockercfg",
			},
		},
		{
			name:    "User=root: HOME=/root",
			rootDir: "/var/lib/kubelet", home: "/root", workDir: "/",
			want: []string{
				"/var/lib/kubelet/config.json",
				"/config.json",
				"/root/.docker/config.json",
				"/.docker/config.json",
				"/var/lib/kubelet/.dockercfg",
				"/.dockercfg",
				"/root/.dockercfg",
			},
		},
		{
			name:    "Environment=HOME=/srv/k",
			rootDir: "/var/lib/kubelet", home: "/srv/k", workDir: "/",
			want: []string{
				"/var/lib/kubelet/config.json",
				"/config.json",
				"/srv/k/.docker/config.json",
				"/.docker/config.json",
				"/var/lib/kubelet/.dockercfg",
				"/.dockercfg",
				"/srv/k/.dockercfg",
			},
		},
		{
			name:    "no working directory: relative paths left out",
			rootDir: "/var/lib/kubelet", home: "", workDir: "",
			want: []string{
				"/var/lib/kubelet/config.json",
				"/.docker/config.json",
				"/var/lib/kubelet/.dockercfg",
				"/.dockercfg",
			},
		},
		{
			name:    "relative root dir and HOME: against the working directory",
			rootDir: "state", home: "h", workDir: "/w",
			want: []string{
				"/w/state/config.json",
				"/w/config.json",
				"/w/h/.docker/config.json",
				"/.docker/config.json",
				"/w/state/.dockercfg",
				"/w/.dockercfg",
				"/w/h/.dockercfg",
				"/.dockercfg",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, keyring.NodeConfigFiles(tt.rootDir, tt.home, tt.workDir))
		})
	}
}
