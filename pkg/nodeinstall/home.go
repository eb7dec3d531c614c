package nodeinstall

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// environment sets the kubelet's Home and WorkDir as systemd gives them
// (systemd.exec(5), ENVIRONMENT and WorkingDirectory=): HOME of its
// Environment= or EnvironmentFile= wins; else a unit with User= gets that
// user's home from the host's /etc/passwd; else the kubelet has no HOME.
// workDir is its WorkingDirectory= ("/" when none is given), "~" the
// home of its User= (root's without one).
func (k *Kubelet) environment(root string, userFrom Flag, workDir string) error {
	var userHome string
	if k.User != "" {
		h, err := UserHome(root, k.User)
		if err != nil {
			return fmt.Errorf("%s: User=%s: %w", userFrom.Where(), k.User, err)
		}
		userHome = h
	}
	switch home, ok := k.Env["HOME"]; {
	case ok:
		k.Home, k.HomeFrom = home, k.Vars["HOME"]
	case k.User != "":
		k.Home, k.HomeFrom = userHome, userFrom
	}
	workDir = strings.TrimPrefix(workDir, "-") // "-": a missing directory is no failure
	switch {
	case workDir == "":
		workDir = "/"
	case workDir == "~" && userHome != "":
		workDir = userHome
	case workDir == "~":
		workDir = "/root"
	}
	k.WorkDir = workDir
	return nil
}

// UserHome returns the home directory systemd gives a unit's User=: that
// of user (a name or a uid) in the host's /etc/passwd under root; root
// (uid 0) has /root when the file does not name it, as systemd's fallback.
func UserHome(root, user string) (string, error) {
	const file = "/etc/passwd"
	data, err := os.ReadFile(hostPath(root, file))
	if err != nil && !os.IsNotExist(err) {
		return "", err
	}
	if h, ok := lookupPasswd(data, user); ok {
		return h, nil
	}
	if user == "root" || user == "0" {
		return "/root", nil
	}
	return "", fmt.Errorf("no such user in %s", file)
}

// lookupPasswd finds user by name, else by uid, in passwd(5) data, and
// returns its home directory (the sixth field).
func lookupPasswd(data []byte, user string) (string, bool) {
	var byUID string
	found := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 7 {
			continue
		}
		if f[0] == user {
			return f[5], true
		}
		if f[2] == user && !found {
			byUID, found = f[5], true
		}
	}
	return byUID, found
}
