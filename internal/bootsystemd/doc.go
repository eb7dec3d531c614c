// Package bootsystemd boots a real systemd for the end-to-end tests: PID 1
// of a PID and mount namespace of its own, chrooted into a copy of a Debian
// root made by debootstrap (cached under CacheDir), as docs/testing.md
// describes ("A real systemd"). test/systemd runs pullguard's units under
// one; test/kubelet's fleet runs each node's kubelet under one. For tests
// only.
package bootsystemd
