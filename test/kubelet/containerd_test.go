package kubelet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerdVersion is the containerd the harness builds (from
// github.com/containerd/containerd/v2 through the Go module proxy) and
// runs: image volumes (KEP-4639) need 2.1 or later; Debian's package is
// 1.6.
const containerdVersion = "v2.2.9"

// containerdCommands are the commands the harness builds: the daemon, its
// runc shim and ctr, which imports the sandbox image.
var containerdCommands = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// buildContainerd returns the directory of containerd's commands, built
// once per version into the module cache (as buildKube does) and reused
// while each reports containerdVersion. `go install cmd@version` builds
// them with containerd's own go.mod, not this module's: its dependencies
// never meet the kubelet's. CGO off (static, as containerd's releases
// build the shim) leaves out the btrfs snapshotter, which needs cgo.
func buildContainerd(t *testing.T) string {
	t.Helper()
	dir := cachedBinaries(t, "containerd-"+containerdVersion)
	var missing []string
	for _, name := range containerdCommands {
		// -v: each prints its version (the shim knows no --version).
		out, err := exec.Command(filepath.Join(dir, name), "-v").CombinedOutput()
		if err != nil || !slices.Contains(strings.Fields(string(out)), containerdVersion) {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return dir
	}
	start := time.Now()
	tmp, err := os.MkdirTemp(dir, "build-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	args := []string{"install", "-tags", "no_btrfs",
		"-ldflags", "-X github.com/containerd/containerd/v2/version.Version=" + containerdVersion}
	for _, name := range missing {
		args = append(args, "github.com/containerd/containerd/v2/cmd/"+name+"@"+containerdVersion)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = tmp // outside this module: cmd@version ignores it anyway
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %v: %s", args, out)
	for _, name := range missing {
		require.NoError(t, os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name)))
	}
	t.Logf("built %v %s in %s (cached in %s)", missing, containerdVersion, time.Since(start).Round(time.Second), dir)
	return dir
}

// containerd is a private containerd: its own configuration, root, state
// and socket, with the CRI settings a kubelet needs on this machine.
type containerd struct {
	dir    string
	bin    string // the directory of containerdCommands
	socket string
	// hosts is the CRI's registry config_path: empty unless a test
	// writes a hosts.toml there (routeRegistry); serve is given it as
	// --registry-config-path. The machine's /etc/containerd/certs.d
	// stays out of the test.
	hosts string
	out   *output
	proc  *child
}

// startContainerd starts the containerd of bin (buildContainerd's
// directory) with a version 3 configuration, in the mount namespace ns
// (nil: the test's own).
func startContainerd(ctx context.Context, dir, bin string, ns *mountNS) (*containerd, error) {
	c := &containerd{dir: dir, bin: bin, socket: filepath.Join(dir, "c.sock"), hosts: filepath.Join(dir, "certs.d")}
	// restrict_oom_score_adj: this VM withholds CAP_SYS_RESOURCE even from
	// root, so runc may not lower a sandbox's OOM score.
	// unpack_config: the transfer service, through which the CRI and ctr
	// pull and import, unpacks only for the snapshotters listed there
	// (by default overlayfs alone).
	// NRI off: it would listen on the fixed /var/run/nri/nri.sock.
	cfg := fmt.Sprintf(`version = 3
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux/amd64"
  snapshotter = "native"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.socket, filepath.Join(dir, "opt"), sandboxImage, c.hosts)
	path := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	var err error
	if c.out, err = newOutput(filepath.Join(dir, "containerd.log")); err != nil {
		return nil, err
	}
	// containerd looks its shim up in PATH before its own directory:
	// bin first, or Debian's 1.6 shim would run.
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	name, args := ns.commandInPIDNS(filepath.Join(bin, "containerd"), "--config", path)
	if c.proc, err = spawn(c.out, env, name, args...); err != nil {
		return nil, err
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.out.await(wait, 0, "containerd successfully booted"); err != nil {
		c.proc.stop(10 * time.Second)
		return nil, fmt.Errorf("containerd: %w\n%s", err, c.out.tail(30))
	}
	if err := c.awaitCRI(wait); err != nil {
		c.proc.stop(10 * time.Second)
		return nil, fmt.Errorf("containerd: %w\n%s", err, c.out.tail(30))
	}
	return c, nil
}

// awaitCRI returns once the CRI plugin answers ListImages. containerd logs
// "successfully booted" before that plugin has finished its own start; a
// CRI call in between fails with "server is not initialized yet".
func (c *containerd) awaitCRI(ctx context.Context) error {
	_, images, done, err := c.cri(ctx)
	if err != nil {
		return err
	}
	defer done()
	for {
		call, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := images.ListImages(call, &runtimeapi.ListImagesRequest{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("its CRI never answered: %w", err)
		case <-time.After(50 * time.Millisecond): // waiting on another process's start
		}
	}
}

func (c *containerd) cri(ctx context.Context) (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+c.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, nil, err
	}
	return runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn), func() { conn.Close() }, nil
}

// routeRegistry sends containerd's pulls of images named on host (such
// as "docker.io") to the registry at addr, over plain HTTP, with a
// hosts.toml in its config_path: the way a node names a mirror. The
// registry's token realm is its own address, so the credentials the
// kubelet gives for host reach it unchanged.
func (c *containerd) routeRegistry(host, addr string) error {
	dir := filepath.Join(c.hosts, host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// server only: no mirror entry, so containerd asks this one host, as
	// it asks a registry of its own name.
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(fmt.Sprintf("server = %q\n", "http://"+addr)), 0o644)
}

// preload pulls an image straight into containerd through the CRI, as a
// node image baked in before the kubelet starts.
func (c *containerd) preload(ctx context.Context, image, user, password string) error {
	_, images, done, err := c.cri(ctx)
	if err != nil {
		return err
	}
	defer done()
	req := &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}
	if user != "" {
		req.Auth = &runtimeapi.AuthConfig{Username: user, Password: password}
	}
	_, err = images.PullImage(ctx, req)
	return err
}

// runtimeSpec is the part of a container's OCI spec the test reads.
type runtimeSpec struct {
	Process *struct {
		User struct {
			UID uint32 `json:"uid"`
		} `json:"user"`
	} `json:"process"`
	Mounts []struct {
		Destination string `json:"destination"`
		Source      string `json:"source"`
	} `json:"mounts"`
}

// runtimeSpec is the runtimeSpec in the "info" of the verbose CRI
// ContainerStatus, asked on containerd's own socket.
func (c *containerd) runtimeSpec(ctx context.Context, id string) (*runtimeSpec, error) {
	rt, _, done, err := c.cri(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	resp, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("container status %s: %w", id, err)
	}
	var info struct {
		RuntimeSpec *runtimeSpec `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil {
		return nil, fmt.Errorf("container status %s: info: %w", id, err)
	}
	if info.RuntimeSpec == nil || info.RuntimeSpec.Process == nil {
		return nil, fmt.Errorf("container status %s: no runtimeSpec.process in its info", id)
	}
	return info.RuntimeSpec, nil
}

// supportsImageVolumes reports whether this containerd mounts image
// volumes (KEP-4639): containerd 2.1 and later. It returns the version
// containerd reports.
func (c *containerd) supportsImageVolumes(ctx context.Context) (bool, string, error) {
	rt, _, done, err := c.cri(ctx)
	if err != nil {
		return false, "", err
	}
	defer done()
	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return false, "", err
	}
	m := majorMinor.FindStringSubmatch(v.GetRuntimeVersion())
	if m == nil {
		return false, v.GetRuntimeVersion(), fmt.Errorf("containerd version %q", v.GetRuntimeVersion())
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major > 2 || (major == 2 && minor >= 1), v.GetRuntimeVersion(), nil
}

var majorMinor = regexp.MustCompile(`^v?(\d+)\.(\d+)`)

// stop removes every pod sandbox of this containerd (which stops their
// containers and shims), stops containerd by its PID, then removes the
// containers' cgroups and kills any shim of this socket that is left.
func (c *containerd) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ids []string
	if rt, _, done, err := c.cri(ctx); err == nil {
		if ctrs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err == nil {
			for _, ct := range ctrs.Containers {
				ids = append(ids, ct.Id)
			}
		}
		if pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
			for _, p := range pods.Items {
				ids = append(ids, p.Id)
				_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id})
				_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id})
			}
		}
		done()
	}
	c.proc.stop(15 * time.Second)
	killShims(c.socket)
	for _, id := range ids {
		removeCgroups(id)
	}
}

// killShims kills the containerd shims started for socket (their command
// line names it), by PID.
func killShims(socket string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for _, a := range args {
			if a == socket {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
}

// removeCgroups kills what is left in a container's cgroups (one per v1
// controller, under containerd's default parent k8s.io) and removes them.
func removeCgroups(id string) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "k8s.io", id))
	for _, d := range dirs {
		procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(procs)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for _, d := range dirs {
		_ = poll(5*time.Second, 20*time.Millisecond, func() (bool, error) {
			err := syscall.Rmdir(d)
			return err == nil || errors.Is(err, syscall.ENOENT), err
		})
	}
}
