package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadServeUnit: serve's unit read as systemd reads it: the last
// ExecStart (an empty one resets), continuation lines, quotes, list
// settings reset by an empty value, drop-ins in name order; serve's flags
// parsed by serve's own flag set.
func TestReadServeUnit(t *testing.T) {
	tests := []struct {
		name      string
		unit      string
		dropins   map[string]string
		wantErr   string
		wantFlags map[string]string
		hidden    map[string]string // path → what hides it ("" : readable)
	}{
		{
			name:      "continuation and quotes",
			unit:      "[Service]\nExecStart=-/usr/bin/pullguard serve \\\n  --listen unix:///run/pg.sock \\\n  --root-dir \"/var/lib/pull guard\"\nProtectHome=read-only\n",
			wantFlags: map[string]string{"listen": "unix:///run/pg.sock", "root-dir": "/var/lib/pull guard", "metrics-bind-address": "127.0.0.1:10264"},
			hidden:    map[string]string{"/root/.docker/config.json": ""},
		},
		{
			name:      "a drop-in resets ExecStart",
			unit:      "[Service]\nExecStart=/usr/bin/pullguard serve --listen unix:///a.sock\nProtectHome=yes\n",
			dropins:   map[string]string{"20-b.conf": "[Service]\nExecStart=\nExecStart=/usr/bin/pullguard serve --listen unix:///b.sock\n", "10-a.conf": "[Service]\nProtectHome=tmpfs\n"},
			wantFlags: map[string]string{"listen": "unix:///b.sock"},
			hidden:    map[string]string{"/root/.docker/config.json": "10-a.conf:2: ProtectHome=tmpfs hides /root", "/var/lib/kubelet/config.json": ""},
		},
		{
			name:    "InaccessiblePaths reset by an empty value",
			unit:    "[Service]\nExecStart=/usr/bin/pullguard serve\nInaccessiblePaths=/var/lib/kubelet\nInaccessiblePaths=\nInaccessiblePaths=-/home\nTemporaryFileSystem=/srv:ro\n",
			hidden:  map[string]string{"/var/lib/kubelet/config.json": "", "/home/u/.docker/config.json": "pullguard.service:5: InaccessiblePaths=-/home hides /home", "/srv/config.json": "pullguard.service:6: TemporaryFileSystem=/srv:ro hides /srv"},
			wantErr: "",
		},
		{
			name:      "quotes and a backslash",
			unit:      "[Service]\nExecStart=/usr/bin/pullguard serve --root-dir '/var/lib/a \"b\"' --listen a\\ b\n",
			wantFlags: map[string]string{"root-dir": `/var/lib/a "b"`, "listen": "a b"},
		},
		{name: "no ExecStart", unit: "[Service]\nType=simple\n", wantErr: "no ExecStart"},
		{name: "not serve", unit: "[Service]\nExecStart=/usr/bin/containerd\n", wantErr: "does not run `pullguard serve`"},
		{name: "a flag serve refuses", unit: "[Service]\nExecStart=/usr/bin/pullguard serve --no-such-flag\n", wantErr: "serve refuses its flags"},
		{name: "unterminated quote", unit: "[Service]\nExecStart=/usr/bin/pullguard serve --root-dir \"/x\n", wantErr: "unterminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "pullguard.service")
			require.NoError(t, os.WriteFile(path, []byte(tt.unit), 0o600))
			for name, data := range tt.dropins {
				require.NoError(t, os.MkdirAll(path+".d", 0o700))
				require.NoError(t, os.WriteFile(filepath.Join(path+".d", name), []byte(data), 0o600))
			}
			found, dropins := findServeUnit("", path)
			require.Equal(t, path, found)
			u, err := readServeUnit(found, dropins)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Contains(t, err.Error(), path, "the error names the unit")
				return
			}
			require.NoError(t, err)
			for flag, want := range tt.wantFlags {
				assert.Equal(t, want, u.flags[flag], "--%s", flag)
			}
			for p, want := range tt.hidden {
				by, fix, hidden := u.hides(p, []string{"/root", "/home", "/run/user"})
				assert.Equal(t, want != "", hidden, p)
				if want != "" {
					assert.Contains(t, by, want)
					assert.NotEmpty(t, fix)
				}
			}
		})
	}
}

// FuzzReadServeUnit: any unit file is read or refused with an error,
// never a panic.
func FuzzReadServeUnit(f *testing.F) {
	f.Add([]byte("[Service]\nExecStart=/usr/bin/pullguard serve \\\n --listen unix:///a.sock\nProtectHome=true\n"))
	f.Add([]byte("[Service]\nExecStart=@'/usr/bin/pullguard' pullguard serve \"--root-dir\" '/x y'\nInaccessiblePaths=-/a +/b\n"))
	f.Add([]byte("[Unit]\n[Service]\nExecStart=\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "pullguard.service")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		u, err := readServeUnit(path, nil)
		if err == nil {
			require.NotNil(t, u.flags)
			u.hides("/root/.docker/config.json", []string{"/root"})
		}
	})
}

// TestFindServeUnitUnderARoot: without --serve-unit, doctor takes
// pullguard.service from systemd's directories under the host's root (a
// package's unit in /usr/lib, install's drop-in in /etc), the first
// directory's drop-in of a name winning.
func TestFindServeUnitUnderARoot(t *testing.T) {
	root := t.TempDir()
	write := func(p, data string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(data), 0o600))
	}
	write("/usr/lib/systemd/system/pullguard.service", "[Service]\nExecStart=/usr/bin/pullguard serve --listen unix:///a.sock\n")
	write("/usr/lib/systemd/system/pullguard.service.d/20-kubelet.conf", "[Service]\nExecStart=\nExecStart=/usr/bin/pullguard serve --listen unix:///lib.sock\n")
	write("/etc/systemd/system/pullguard.service.d/20-kubelet.conf", "[Service]\nExecStart=\nExecStart=/usr/bin/pullguard serve --listen unix:///etc.sock\n")
	write("/etc/systemd/system/pullguard.service.d/10-more.conf", "[Service]\nProtectHome=read-only\n")

	path, dropins := findServeUnit(root, "")
	require.Equal(t, filepath.Join(root, "/usr/lib/systemd/system/pullguard.service"), path)
	assert.Equal(t, []string{
		filepath.Join(root, "/etc/systemd/system/pullguard.service.d/10-more.conf"),
		filepath.Join(root, "/etc/systemd/system/pullguard.service.d/20-kubelet.conf"),
	}, dropins)
	u, err := readServeUnit(path, dropins)
	require.NoError(t, err)
	assert.Equal(t, "unix:///etc.sock", u.flags["listen"])

	none, _ := findServeUnit(t.TempDir(), "")
	assert.Empty(t, none)
}

// TestShippedUnitHasNoHome: the package's pullguard.service gives serve no
// HOME (no User=, no Environment=HOME=) and the working directory /, as
// systemd starts kubeadm's kubelet: serve searches the node's docker
// credentials where that kubelet does.
func TestShippedUnitHasNoHome(t *testing.T) {
	u, err := readServeUnit(filepath.Join("..", "..", "deploy", "systemd", "pullguard.service"), nil)
	require.NoError(t, err)
	env, err := u.environment(t.TempDir())
	require.NoError(t, err)
	assert.Empty(t, env.home, "serve's HOME")
	assert.Equal(t, "/", env.workDir)
	_, hasUser := u.last("User")
	assert.False(t, hasUser, "User= gives serve its user's HOME")
}
