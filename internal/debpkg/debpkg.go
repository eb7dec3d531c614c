// Package debpkg installs the Debian packages a test suite needs (as root,
// with apt-get), for the suites that run real components: containerd,
// runc and docker-registry (test/e2e), etcd (test/kubelet), systemd's tools
// (cmd/pullguard, test/systemd). Only tests import it.
//
// Test binaries of several packages run at once, and apt-get fails at once
// when another apt-get holds its locks: Install holds a lock of its own
// (/var/lock/pullguard-apt.lock) for the whole update and install, and asks
// apt-get to wait for dpkg's lock too (another program's apt-get).
package debpkg

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// lockFile serializes the installs of this repository's test binaries.
const lockFile = "/var/lock/pullguard-apt.lock"

// Install runs apt-get update and apt-get install of pkgs (without their
// recommended packages), noninteractive, under lockFile. Its error holds the
// end of apt-get's output.
func Install(pkgs ...string) error {
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("failed to open %s: %w", lockFile, err)
	}
	defer f.Close()
	// Blocks while another test binary installs; the test binary's own
	// -timeout bounds the wait.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("failed to lock %s: %w", lockFile, err)
	}
	for _, args := range [][]string{
		{"update"},
		append([]string{"-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends"}, pkgs...),
	} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			if len(out) > 2000 {
				out = out[len(out)-2000:]
			}
			return fmt.Errorf("apt-get %v: %w\n%s", args, err, out)
		}
	}
	return nil
}
