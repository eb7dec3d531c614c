package main

import (
	"os"
	"path/filepath"
	"strconv"
)

// SystemRootDir is the root directory when pullguard runs as root, as
// /var/lib/kubelet is the kubelet's.
const SystemRootDir = "/var/lib/pullguard"

const rootDirUsage = "directory for the credential records, the hash key and the embedded runtime's images " +
	"(default: " + SystemRootDir + " as root, else $XDG_STATE_HOME/pullguard or ~/.local/state/pullguard)"

// defaultRootDir is always an absolute path, so that `records` run from
// another directory finds the same state: /var/lib/pullguard as root, the
// user's state directory otherwise (so that trying pullguard needs no
// root), and a directory under the temporary directory if the user has no
// home.
func defaultRootDir() string {
	if os.Geteuid() == 0 {
		return SystemRootDir
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "pullguard")
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		return filepath.Join(home, ".local", "state", "pullguard")
	}
	return filepath.Join(os.TempDir(), "pullguard-"+uidString())
}

func uidString() string {
	return strconv.Itoa(os.Geteuid())
}
