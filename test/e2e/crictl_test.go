package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// crictlVersion is the cri-tools release the suite builds crictl from
// (testdata/crictl pins it with its go.sum, so the build needs only the Go
// module proxy, and the module cache keeps it between runs).
const crictlVersion = "v1.36.0"

var (
	crictlOnce sync.Once
	crictlPath string
	crictlErr  error
)

// crictlBinary builds crictl, a CRI client nobody here wrote, once per run.
func crictlBinary(t *testing.T) string {
	t.Helper()
	crictlOnce.Do(func() {
		crictlPath = filepath.Join(h.dir, "crictl")
		cmd := exec.Command("go", "build", "-o", crictlPath, "sigs.k8s.io/cri-tools/cmd/crictl")
		cmd.Dir = "testdata/crictl"
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if out, err := cmd.CombinedOutput(); err != nil {
			crictlErr = fmt.Errorf("go build crictl %s: %v\n%s", crictlVersion, err, out)
		}
	})
	require.NoError(t, crictlErr)
	return crictlPath
}

// crictl runs crictl against imageEndpoint (containerd stays the runtime
// endpoint, as on a node) and returns its output and whether it succeeded.
func crictl(t *testing.T, imageEndpoint string, args ...string) (string, bool) {
	t.Helper()
	return startCrictl(t, imageEndpoint, args...).result(t)
}

// crictlRun is a crictl process started by startCrictl.
type crictlRun struct {
	args []string
	cmd  *exec.Cmd
	out  bytes.Buffer
	err  error
	done chan struct{} // closed once the process has exited and err is set
}

// startCrictl starts crictl as crictl does and returns at once. Only the
// wait for the process runs on another goroutine; every assertion is in
// result, on the test's own. The test's end kills a crictl still running.
func startCrictl(t *testing.T, imageEndpoint string, args ...string) *crictlRun {
	t.Helper()
	cfg := filepath.Join(h.dir, "crictl.yaml")
	if _, err := os.Stat(cfg); err != nil {
		require.NoError(t, os.WriteFile(cfg, nil, 0o600))
	}
	argv := append([]string{"--config", cfg, "--runtime-endpoint", h.containerd.endpoint(), "--image-endpoint", imageEndpoint, "--timeout", "120s"}, args...)
	r := &crictlRun{args: args, cmd: exec.Command(crictlBinary(t), argv...), done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	require.NoError(t, r.cmd.Start(), "crictl %v", redactCreds(args))
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// result waits for crictl to exit and returns its output and whether it
// succeeded; the output joins those the leak scan reads.
func (r *crictlRun) result(t *testing.T) (string, bool) {
	t.Helper()
	<-r.done
	secretsMu.Lock()
	outputs = append(outputs, r.out.String())
	secretsMu.Unlock()
	if r.err != nil {
		var exit *exec.ExitError
		require.ErrorAs(t, r.err, &exit, "crictl %v", redactCreds(r.args))
	}
	return r.out.String(), r.err == nil
}

// podConfig writes a crictl pod config (the sandbox metadata the kubelet
// sends with PullImage) and returns its path.
func podConfig(t *testing.T, ns, name string) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{"metadata": map[string]string{"name": name, "namespace": ns, "uid": ns + "-" + name + "-uid", "attempt": "0"}})
	require.NoError(t, err)
	f, err := os.CreateTemp(h.dir, "pod-*.json")
	require.NoError(t, err)
	_, err = f.Write(bytes.Replace(data, []byte(`"attempt":"0"`), []byte(`"attempt":0`), 1))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}

// crictlPull ensures image through endpoint as the kubelet does for an
// IfNotPresent container of pod ns/name: `crictl inspecti IMAGE` (the CRI
// ImageStatus), and if the image is reported absent, `crictl pull
// [--creds USER:PASSWORD] --pod-config POD IMAGE`.
func crictlPull(t *testing.T, endpoint, ns, name, image string, who *tenant) (string, bool) {
	t.Helper()
	if inspecti(t, endpoint, image) {
		return "present", true
	}
	return crictlPullAlways(t, endpoint, ns, name, image, who)
}

// crictlPullAlways pulls as the kubelet does for an Always container:
// `crictl pull` with no ImageStatus before it.
func crictlPullAlways(t *testing.T, endpoint, ns, name, image string, who *tenant) (string, bool) {
	t.Helper()
	return crictl(t, endpoint, pullArgs(t, ns, name, image, who)...)
}

// redactCreds is args with the value after --creds (USER:PASSWORD)
// replaced, for a failure message.
func redactCreds(args []string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if out[i] == "--creds" && i+1 < len(out) {
			out[i+1] = "<redacted>"
		}
	}
	return out
}

// pullArgs are crictl's arguments for a pull of image by pod ns/name with
// who's credentials (none if who is nil).
func pullArgs(t *testing.T, ns, name, image string, who *tenant) []string {
	t.Helper()
	args := []string{"pull", "--pod-config", podConfig(t, ns, name)}
	if who != nil {
		args = append(args, "--creds", who.user+":"+who.password)
	}
	return append(args, image)
}

// inspecti says whether `crictl inspecti IMAGE` finds the image through
// endpoint (the CRI ImageStatus the kubelet asks before it pulls).
func inspecti(t *testing.T, endpoint, image string) bool {
	t.Helper()
	out, ok := crictl(t, endpoint, "inspecti", "-o", "json", image)
	if ok {
		return true
	}
	require.Contains(t, strings.ToLower(out), "no such image", "crictl inspecti %s: %s", image, out)
	return false
}

// serveDaemon is a `pullguard serve` in front of the suite's containerd.
type serveDaemon struct {
	socket, root string
	log          *logSink
	proc         *process
	metrics      string
}

func (d *serveDaemon) endpoint() string { return "unix://" + d.socket }

// startServe starts `pullguard serve` on root and waits until it serves.
func startServe(t testing.TB, root string, args ...string) *serveDaemon {
	t.Helper()
	d := &serveDaemon{root: root, socket: filepath.Join(root, "pg.sock")}
	var err error
	d.log, err = newLogSink(filepath.Join(root, "..", filepath.Base(root)+"-serve.log"))
	require.NoError(t, err)
	d.start(t, args...)
	t.Cleanup(func() {
		d.proc.stop() // the latest one, after restarts
		secretsMu.Lock()
		outputs = append(outputs, d.log.all())
		secretsMu.Unlock()
	})
	return d
}

// start starts the daemon (again); startServe's cleanup stops it.
func (d *serveDaemon) start(t testing.TB, args ...string) {
	t.Helper()
	mark := d.log.mark()
	argv := append([]string{"serve", "--listen", d.endpoint(), "--image-service-endpoint", h.containerd.endpoint(), "--root-dir", d.root,
		"--metrics-bind-address", "127.0.0.1:0", "--kubelet-root-dir", filepath.Join(d.root, "kubelet"),
		"--admin-socket", filepath.Join(d.root, "admin.sock"), "-v=2"}, args...)
	p, err := startProcessEnv(d.log, proxyEnv(), h.binary, argv...)
	require.NoError(t, err)
	d.proc = p
	require.True(t, d.log.waitFor(mark, "pullguard: serving on", 60*time.Second), "serve did not start:\n%s", d.log.all())
	for _, l := range d.log.since(mark) {
		if i := strings.Index(l, `"Serving /metrics and /healthz"`); i >= 0 {
			if j := strings.Index(l, `address="`); j >= 0 {
				d.metrics = strings.SplitN(l[j+len(`address="`):], `"`, 2)[0]
			}
		}
	}
}

// kill ends the daemon with SIGKILL.
func (d *serveDaemon) kill() {
	_ = d.proc.cmd.Process.Kill()
	<-d.proc.done
}
