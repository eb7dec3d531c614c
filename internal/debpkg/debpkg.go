// Package debpkg installs the Debian packages a test suite needs (as root,
// with apt-get), for the suites that run real components: containerd,
// runc and docker-registry (test/e2e), etcd (test/kubelet), systemd's tools
// (cmd/pullguard, test/systemd); or unpacks one without installing it
// (promtool, for cmd/pullguard's tests of deploy/monitoring). Only tests
// import it.
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
	"path/filepath"
	"syscall"
)

// lockFile serializes the installs of this repository's test binaries.
const lockFile = "/var/lock/pullguard-apt.lock"

// Install runs apt-get update and apt-get install of pkgs (without their
// recommended packages), noninteractive, under lockFile. Its error holds the
// end of apt-get's output.
func Install(pkgs ...string) error {
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer unlock()
	return run("", [][]string{
		{"apt-get", "update"},
		append([]string{"apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends"}, pkgs...),
	})
}

// Extract unpacks the Debian package pkg into dir (dir/usr/bin/...) without
// installing it: apt-get update, apt-get download and dpkg -x, under
// lockFile. Nothing of the package runs (no maintainer script starts a
// service) and nothing it depends on is installed: for a tool the test
// runs alone, such as promtool of the prometheus package.
func Extract(pkg, dir string) error {
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer unlock()
	tmp, err := os.MkdirTemp("", "debpkg-")
	if err != nil {
		return fmt.Errorf("failed to create a directory for %s: %w", pkg, err)
	}
	defer os.RemoveAll(tmp)
	if err := run(tmp, [][]string{{"apt-get", "update"}, {"apt-get", "download", pkg}}); err != nil {
		return err
	}
	debs, err := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if err != nil || len(debs) != 1 {
		return fmt.Errorf("apt-get download %s: want one .deb in %s, found %v", pkg, tmp, debs)
	}
	// Unpacked beside dir and renamed into place: dir is whole or absent.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("failed to create %s: %w", filepath.Dir(dir), err)
	}
	part, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".part-")
	if err != nil {
		return fmt.Errorf("failed to create a directory beside %s: %w", dir, err)
	}
	defer os.RemoveAll(part)
	if err := run("", [][]string{{"dpkg", "-x", debs[0], part}}); err != nil {
		return err
	}
	if err := os.Chmod(part, 0o755); err != nil {
		return fmt.Errorf("failed to unpack %s into %s: %w", pkg, dir, err)
	}
	if err := os.Rename(part, dir); err != nil {
		return fmt.Errorf("failed to unpack %s into %s: %w", pkg, dir, err)
	}
	return nil
}

// lock takes lockFile; it blocks while another test binary installs (the
// test binary's own -timeout bounds the wait).
func lock() (unlock func(), err error) {
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("failed to open %s: %w", lockFile, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("failed to lock %s: %w", lockFile, err)
	}
	return func() { f.Close() }, nil
}

// run runs each command in dir (the current directory if ""),
// noninteractive; its error holds the end of the failing command's output.
func run(dir string, cmds [][]string) error {
	for _, args := range cmds {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			if len(out) > 2000 {
				out = out[len(out)-2000:]
			}
			return fmt.Errorf("%v: %w\n%s", args, err, out)
		}
	}
	return nil
}
