package kubelet

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/debpkg"
)

// kubeVersion is the k8s.io/kubernetes version go.mod requires; the
// kubelet and kube-apiserver are built from it once and cached.
const kubeVersion = "v1.36.3"

const adminUser = "e2e-admin"

// binaries are the programs a cluster runs.
type binaries struct {
	kubelet, apiserver string
	// kubeletRelease and apiserverRelease are their releases.
	kubeletRelease, apiserverRelease kubeRelease
	containerd                       string // the directory of containerdCommands
	pullguard                        string // "" when `pullguard serve` is not available
	noServe                          string // why, then
	pauseBytes                       []byte
}

// prerequisites makes sure the Debian packages are there: as root it
// installs what is missing; otherwise, or when that fails, the test is
// skipped, except in CI (CI=true), where it fails.
func prerequisites(t *testing.T) {
	t.Helper()
	unable := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubelet e2e cannot run in CI: %s", msg)
		}
		t.Skipf("kubelet e2e skipped: %s (run it as root on Linux: sudo make e2e-kubelet)", msg)
	}
	if runtime.GOOS != "linux" {
		unable("it needs Linux")
	}
	if os.Geteuid() != 0 {
		unable("it needs root (the kubelet runs containers)")
	}
	if len(missingTools()) == 0 {
		return
	}
	t.Logf("installing runc docker-registry etcd-server (missing: %v)", missingTools())
	if err := debpkg.Install("runc", "docker-registry", "etcd-server"); err != nil {
		unable("%v", err)
	}
	if m := missingTools(); len(m) > 0 {
		unable("%v still missing after apt-get install", m)
	}
}

func missingTools() []string {
	var missing []string
	// containerd is not among them: buildContainerd builds it.
	for _, tool := range []string{"runc", "etcd", "/usr/bin/docker-registry"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, filepath.Base(tool))
		}
	}
	return missing
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// machineLock is the machine-wide lock: the kubelet touches fixed paths
// and kernel settings, so one such test runs at a time.
const machineLock = "pullguard-e2e-kubelet.lock"

// lockMachine takes the lock of that name in the temporary directory,
// waiting for another run that holds it.
func lockMachine(t *testing.T, name string) {
	t.Helper()
	path := filepath.Join(os.TempDir(), name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	err = poll(20*time.Minute, 500*time.Millisecond, func() (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		return err == nil, err
	})
	require.NoError(t, err, "another kubelet e2e run holds %s", path)
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// kernelSettings are the sysctls the kubelet may change at start-up.
var kernelSettings = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// keepKernelSettings records the sysctls and restores them at the end.
func keepKernelSettings(t *testing.T) {
	t.Helper()
	saved := map[string][]byte{}
	for _, k := range kernelSettings {
		if v, err := os.ReadFile("/proc/sys/" + k); err == nil {
			saved[k] = v
		}
	}
	t.Cleanup(func() {
		for k, v := range saved {
			if now, err := os.ReadFile("/proc/sys/" + k); err == nil && string(now) == string(v) {
				continue
			}
			if err := os.WriteFile("/proc/sys/"+k, v, 0o644); err != nil {
				t.Errorf("restore sysctl %s: %v", k, err)
			} else {
				t.Logf("restored sysctl %s to %s", strings.ReplaceAll(k, "/", "."), strings.TrimSpace(string(v)))
			}
		}
	})
}

// Fixed paths the kubelet and containerd create whatever their own
// directories are. What did not exist before the run is removed after it
// (directories only when empty: another runtime on the machine may use
// them by then).
var fixedFiles = []string{"/var/lib/kubelet/device-plugins/kubelet.sock"}

var fixedDirs = []string{ // deepest first
	"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins",
	"/var/lib/kubelet", "/var/log/containers", "/run/containerd/s",
	"/run/containerd/runc/k8s.io", "/run/containerd/runc", "/run/containerd",
}

func keepFixedPaths(t *testing.T, podLogs func() []string) {
	t.Helper()
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*")
	existed := map[string]bool{}
	var all []string
	all = append(all, fixedFiles...)
	all = append(all, fixedDirs...)
	for _, c := range cgroups {
		all = append(all, filepath.Join(c, "k8s.io"))
	}
	for _, p := range all {
		if _, err := os.Lstat(p); err == nil {
			existed[p] = true
		}
	}
	t.Cleanup(func() {
		// Symlinks to this run's pod logs.
		links, _ := filepath.Glob("/var/log/containers/*")
		for _, l := range links {
			target, err := os.Readlink(l)
			if err != nil {
				continue
			}
			for _, dir := range podLogs() {
				if strings.HasPrefix(target, dir+"/") {
					_ = os.Remove(l)
				}
			}
		}
		for _, p := range all {
			if !existed[p] {
				_ = os.Remove(p) // a directory only if empty
			}
		}
	})
}

// TestBinaries builds what the scenarios run into the module cache (the
// kubelet and kube-apiserver, containerd's commands) and installs the
// Debian packages they need, and nothing else: `make test` runs it alone
// first (e2e-kubelet-build), then the scenarios beside the unit tests.
// Run again, it finds the binaries built and returns.
func TestBinaries(t *testing.T) {
	prerequisites(t)
	start := time.Now()
	kubelet, apiserver, _, _ := kubeBinaries(t)
	ctrd := buildContainerd(t)
	t.Logf("binaries ready in %s: %s, %s, %s", time.Since(start).Round(100*time.Millisecond), kubelet, apiserver, ctrd)
}

// cachedBinaries is the directory, created if need be, of the binaries the
// test builds once per version: under the module cache, which CI caches.
func cachedBinaries(t *testing.T, version string) string {
	t.Helper()
	gomodcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	require.NoError(t, err)
	dir := filepath.Join(strings.TrimSpace(string(gomodcache)), "cache", "pullguard-e2e", version)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// buildKube returns the kubelet and kube-apiserver of kubeVersion, built
// from this module (buildCommands).
func buildKube(t *testing.T) (kubelet, apiserver string) {
	t.Helper()
	rel, err := parseRelease(kubeVersion)
	require.NoError(t, err)
	dir := buildCommands(t, rel, []string{"kubelet", "kube-apiserver"}, nil)
	return filepath.Join(dir, "kubelet"), filepath.Join(dir, "kube-apiserver")
}

// buildCommands returns the directory of names (commands of
// k8s.io/kubernetes/cmd) at rel, built once per release into the module
// cache (CI caches it) and reused while each one's --version names rel.
// The build runs in the module module returns (given the build's
// temporary directory, which it may use); nil: this module.
func buildCommands(t *testing.T, rel kubeRelease, names []string, module func(tmp string) string) string {
	t.Helper()
	dir := cachedBinaries(t, rel.version)
	var missing []string
	for _, name := range names {
		out, err := exec.Command(filepath.Join(dir, name), "--version").Output()
		if err != nil || strings.TrimSpace(string(out)) != "Kubernetes "+rel.version {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return dir
	}
	// One go build for all: their shared packages compile once, in
	// parallel with the rest.
	start := time.Now()
	tmp, err := os.MkdirTemp(dir, "build-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	var moduleDir string
	if module != nil {
		moduleDir = module(tmp)
	}
	// Only -X: -w would also turn off DWARF in the compiler, which misses
	// the Go build cache of every package.
	ldflags := strings.Join([]string{
		"-X k8s.io/component-base/version.gitVersion=" + rel.version,
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=" + strconv.Itoa(rel.minor),
		"-X k8s.io/component-base/version.gitTreeState=clean",
	}, " ")
	args := []string{"build", "-ldflags", ldflags, "-o", tmp + "/"}
	for _, name := range missing {
		args = append(args, "k8s.io/kubernetes/cmd/"+name)
	}
	cmd := exec.Command("go", args...)
	if moduleDir != "" {
		cmd.Dir = moduleDir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %v: %s", args, out)
	for _, name := range missing {
		require.NoError(t, os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name)))
	}
	t.Logf("built %v %s in %s (cached in %s)", missing, rel.version, time.Since(start).Round(time.Second), dir)
	return dir
}

// buildPullguard builds pullguard from the checkout this test is in (or,
// for development, from PULLGUARD_E2E_SOURCE) and checks that it has
// `serve`.
func buildPullguard(t *testing.T, dir string) (bin, why string) {
	t.Helper()
	src := filepath.Join("..", "..")
	if s := os.Getenv("PULLGUARD_E2E_SOURCE"); s != "" {
		src = s
	}
	bin = filepath.Join(dir, "pullguard")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/pullguard")
	cmd.Dir = src
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/pullguard in %s: %s", src, out)
	if out, err := exec.Command(bin, "serve", "--help").CombinedOutput(); err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return "", fmt.Sprintf("this checkout's pullguard has no working `serve` command (`pullguard serve --help`: %v: %s)", err, lastBytes([]byte(first), 300))
	}
	return bin, ""
}

// newSecret makes up a password.
func newSecret(who string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "pw-" + who + "-" + hex.EncodeToString(b)
}

// prepare does everything both modes share: prerequisites, the machine
// lock, the kernel settings and fixed paths to restore, and the binaries.
func prepare(t *testing.T) (binaries, *[]string) {
	t.Helper()
	return prepareLocked(t, machineLock)
}

// prepareLocked is prepare under the lock of that name.
func prepareLocked(t *testing.T, lock string) (binaries, *[]string) {
	t.Helper()
	prerequisites(t)
	lockMachine(t, lock)
	keepKernelSettings(t)
	podLogs := &[]string{}
	keepFixedPaths(t, func() []string { return *podLogs })

	start := time.Now()
	var b binaries
	b.kubelet, b.apiserver, b.kubeletRelease, b.apiserverRelease = kubeBinaries(t)
	b.containerd = buildContainerd(t)
	dir := t.TempDir()
	b.pullguard, b.noServe = buildPullguard(t, dir)
	pause := filepath.Join(dir, "pause")
	require.NoError(t, buildPause(pause))
	var err error
	b.pauseBytes, err = os.ReadFile(pause)
	require.NoError(t, err)
	t.Logf("binaries ready in %s", time.Since(start).Round(100*time.Millisecond))
	return b, podLogs
}
