package main_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/announce"
	"github.com/pullguard/pullguard/pkg/credential"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
	"github.com/pullguard/pullguard/pkg/keyring"
)

var (
	testPluginOnce sync.Once
	testPlugin     string
	testPluginErr  error
)

// buildTestPlugin builds pkg/credentialprovider's test plugin once.
func buildTestPlugin(t *testing.T) string {
	t.Helper()
	testPluginOnce.Do(func() {
		testPlugin = filepath.Join(filepath.Dir(binary), "testplugin")
		out, err := exec.Command("go", "build", "-o", testPlugin, "../../pkg/credentialprovider/testdata/plugin").CombinedOutput()
		if err != nil {
			testPluginErr = errors.New("building the test plugin: " + err.Error() + "\n" + string(out))
		}
	})
	require.NoError(t, testPluginErr)
	return testPlugin
}

const (
	wrapRegistry = "registry.example"
	wrapImage    = wrapRegistry + "/team/app"
	wrapRequest  = `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"` + wrapImage + `"}`
	saToken      = "sa-token-of-a-pod-93c1d7"
	saRequest    = `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"` + wrapImage + `","serviceAccountToken":"` + saToken + `"}`
)

// wrapperNode is a kubelet plugin bin directory holding the test plugin
// ("plug") and the wrapper's link to pullguard ("pullguard-plug"), and
// serve's root directory.
type wrapperNode struct {
	bin, root string
}

func newWrapperNode(t *testing.T) *wrapperNode {
	t.Helper()
	n := &wrapperNode{bin: filepath.Join(t.TempDir(), "bin"), root: filepath.Join(t.TempDir(), "pullguard")}
	require.NoError(t, os.Mkdir(n.bin, 0o755))
	require.NoError(t, os.Mkdir(n.root, 0o700))
	require.NoError(t, os.Symlink(buildTestPlugin(t), filepath.Join(n.bin, "plug")))
	require.NoError(t, os.Symlink(binary, filepath.Join(n.bin, cp.WrapperLink("plug"))))
	return n
}

// wrapperArgs are the args of the entry WrapProvider writes for "plug".
func (n *wrapperNode) wrapperArgs(pluginArgs ...string) []string {
	return cp.Wrapper{Plugin: "plug", DefaultCacheDuration: time.Hour, MatchImages: []string{wrapRegistry}, RootDir: n.root, Args: pluginArgs}.ArgList()
}

// outcome is how a process ended, as the kubelet sees it.
type outcome struct {
	stdout, stderr []byte
	code           int
	signal         syscall.Signal
}

// proc is a started process and its outputs.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

// start runs path with args and stdin as the kubelet runs a plugin.
func start(t *testing.T, path string, args []string, stdin string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(path, args...)}
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start())
	return p
}

func wait(t *testing.T, p *proc) outcome {
	t.Helper()
	err := p.cmd.Wait()
	o := outcome{stdout: p.stdout.Bytes(), stderr: p.stderr.Bytes()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		o.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			o.signal = ws.Signal()
		}
	} else {
		require.NoError(t, err)
	}
	return o
}

func (n *wrapperNode) wrapped(t *testing.T, stdin string, pluginArgs ...string) outcome {
	t.Helper()
	return wait(t, start(t, filepath.Join(n.bin, cp.WrapperLink("plug")), n.wrapperArgs(pluginArgs...), stdin))
}

func (n *wrapperNode) direct(t *testing.T, stdin string, pluginArgs ...string) outcome {
	t.Helper()
	return wait(t, start(t, filepath.Join(n.bin, "plug"), pluginArgs, stdin))
}

func (n *wrapperNode) dir() string { return filepath.Join(n.root, announce.Dir) }

// announced lists the announcement files.
func (n *wrapperNode) announced(t *testing.T) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(n.dir(), "*.json"))
	require.NoError(t, err)
	return names
}

// isNode says whether serve would record a pull of image with the
// credential as the node's.
func (n *wrapperNode) isNode(t *testing.T, image, user, pass string) bool {
	t.Helper()
	im, err := keyring.ParseImage(image)
	require.NoError(t, err)
	_, ok := announce.NewBoard(n.dir()).Source(im, credential.AuthConfig{Username: user, Password: pass})
	return ok
}

// TestCredentialProviderPassesThrough: the kubelet gets from the wrapper
// exactly what it gets from the plugin (stdout byte for byte, exit status,
// the signal that killed it, stderr), and serve learns the keyed hash of a
// successful answer, unless it is a service account's; an answer that
// cannot be announced is still the kubelet's.
func TestCredentialProviderPassesThrough(t *testing.T) {
	user, pass := "user:"+wrapImage, "pass:"+wrapImage // the test plugin's answer
	tests := []struct {
		name      string
		stdin     string
		args      []string
		breakRoot bool // serve's root directory cannot hold announcements
		announced bool
		// note is on the wrapper's stderr after the plugin's.
		note string
	}{
		{name: "an answer", stdin: wrapRequest, args: []string{"-mode", "good", "-key-type", "Registry"}, announced: true},
		{name: "an answer the kubelet does not cache", stdin: wrapRequest, args: []string{"-mode", "good", "-duration", "0s"}, announced: true},
		{name: "a non-zero exit", stdin: wrapRequest, args: []string{"-mode", "crash"}},
		{name: "killed by a signal", stdin: wrapRequest, args: []string{"-mode", "sigkill"}},
		{name: "garbage", stdin: wrapRequest, args: []string{"-mode", "garbage"}, note: "not announced to serve"},
		{name: "the wrong apiVersion", stdin: wrapRequest, args: []string{"-mode", "good", "-api-version", "credentialprovider.kubelet.k8s.io/v1beta1"}, note: "not announced to serve"},
		{name: "a service account's token", stdin: saRequest, args: []string{"-mode", "good"}},
		{name: "a request that does not decode", stdin: `{"kind":"CredentialProviderRequest","image":"` + wrapImage + `"}`, args: []string{"-mode", "good"}, note: "not announced to serve"},
		// The kubelet decodes answers strictly: one it refuses is not
		// announced, though the kubelet got it (and did not use it).
		{name: "an unknown field", stdin: wrapRequest, args: []string{"-mode", "good", "-extra", `"future":true`}, note: "an unknown field"},
		{name: "a miscased field", stdin: wrapRequest, args: []string{"-mode", "good", "-extra", `"Auth":{}`}, note: "auth miscased"},
		{name: "a duplicated field", stdin: wrapRequest, args: []string{"-mode", "good", "-extra", `"auth":{}`}, note: "duplicated auth"},
		{name: "an unknown field in an auth entry (auth given twice)", stdin: wrapRequest, args: []string{"-mode", "good", "-auth-keys", "", "-extra", `"auth":{"` + wrapRegistry + `":{"username":"u","password":"p","auth":"dTpw"}}`}, note: "an unknown or miscased one in auth"},
		// A negative cacheDuration: the kubelet uses the answer for the
		// look-up that ran the plugin, and does not cache it.
		{name: "a negative cacheDuration", stdin: wrapRequest, args: []string{"-mode", "good", "-duration", "-1m"}, announced: true},
		{name: "a request the kubelet does not write", stdin: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1alpha1","kind":"CredentialProviderRequest","image":"` + wrapImage + `","serviceAccountToken":"` + saToken + `"}`, args: []string{"-mode", "good"}, note: "the kubelet's request: request has an unknown, duplicated or miscased field"},
		{name: "announcing fails", stdin: wrapRequest, args: []string{"-mode", "good"}, breakRoot: true, note: "not announced to serve"},
		{name: "stderr past its bound", stdin: wrapRequest, args: []string{"-mode", "hugeerr"}, announced: false, note: "stderr was cut at 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newWrapperNode(t)
			if tt.breakRoot {
				require.NoError(t, os.WriteFile(n.dir(), nil, 0o600))
			}
			want := n.direct(t, tt.stdin, tt.args...)
			got := n.wrapped(t, tt.stdin, tt.args...)
			assert.True(t, bytes.Equal(want.stdout, got.stdout), "stdout, byte for byte:\n%s\nwant\n%s", got.stdout, want.stdout)
			assert.Equal(t, want.code, got.code, "exit status")
			assert.Equal(t, want.signal, got.signal, "killed by the same signal")
			switch {
			case len(want.stderr) > 64<<10:
				assert.True(t, bytes.HasPrefix(got.stderr, want.stderr[:64<<10]), "stderr is the plugin's, cut")
				assert.Less(t, len(got.stderr), 65<<10)
			default:
				assert.True(t, bytes.HasPrefix(got.stderr, want.stderr), "stderr is the plugin's: %s", got.stderr)
			}
			rest := string(got.stderr[min(len(got.stderr), len(want.stderr), 64<<10):])
			if tt.note == "" {
				assert.Empty(t, rest, "nothing but the plugin's stderr")
			} else {
				assert.Contains(t, rest, tt.note)
			}
			if tt.breakRoot {
				return
			}
			assert.Equal(t, tt.announced, len(n.announced(t)) == 1, "announced")
			assert.Equal(t, tt.announced, n.isNode(t, wrapImage+":v1", user, pass), "serve takes the answer for the node's")
			texts := map[string]string{"stderr": string(got.stderr)}
			for _, f := range n.announced(t) {
				data, err := os.ReadFile(f)
				require.NoError(t, err)
				texts[f] = string(data)
			}
			assert.Empty(t, leak.Scan(texts, pass, saToken), "a credential got out")
		})
	}
}

// TestCredentialProviderMintedTokens: a plugin that mints a token per
// call (ECR's) gives each run another password; each is announced, and a
// password nobody was given is not the node's.
func TestCredentialProviderMintedTokens(t *testing.T) {
	n := newWrapperNode(t)
	account := filepath.Join(t.TempDir(), "account")
	require.NoError(t, os.WriteFile(account, []byte("AWS\n"), 0o600))
	minted := filepath.Join(t.TempDir(), "minted")
	args := []string{"-mode", "mint", "-account", account, "-minted", minted, "-key-type", "Registry", "-auth-keys", "{registry}"}
	for i := 0; i < 2; i++ {
		got := n.wrapped(t, wrapRequest, args...)
		require.Zero(t, got.code, "%s", got.stderr)
	}
	data, err := os.ReadFile(minted)
	require.NoError(t, err)
	lines := strings.Fields(string(data))
	require.Len(t, lines, 2)
	assert.NotEqual(t, lines[0], lines[1], "a new token per call")
	for _, l := range lines {
		user, pass, _ := strings.Cut(l, ":")
		assert.True(t, n.isNode(t, wrapRegistry+"/other/tool", user, pass), "the minted token is the node's, registry-wide")
		assert.False(t, n.isNode(t, "other.example/team/app", user, pass), "not for another registry")
	}
	assert.False(t, n.isNode(t, wrapImage, "AWS", "minted-by-nobody"))
}

// TestCredentialProviderKilledLeavesNothing: the kubelet kills a plugin
// run that takes over a minute (SIGKILL, to the process it started: the
// wrapper); nothing the plugin started outlives the wrapper.
func TestCredentialProviderKilledLeavesNothing(t *testing.T) {
	n := newWrapperNode(t)
	dir := t.TempDir()
	pidfile, pluginPid := filepath.Join(dir, "grandchild.pid"), filepath.Join(dir, "plugin.pid")
	p := start(t, filepath.Join(n.bin, cp.WrapperLink("plug")),
		n.wrapperArgs("-mode", "hang", "-pidfile", pidfile, "-plugin-pidfile", pluginPid), wrapRequest)
	require.Eventually(t, func() bool { _, err := os.Stat(pidfile); return err == nil }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, p.cmd.Process.Kill())
	o := wait(t, p)
	assert.Equal(t, syscall.SIGKILL, o.signal)
	for _, f := range []string{pidfile, pluginPid} {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		require.NoError(t, err)
		assert.Eventually(t, func() bool { return gone(pid) }, 30*time.Second, 10*time.Millisecond, "process %d outlived the wrapper", pid)
	}
	assert.Empty(t, n.announced(t))
}

// gone reports whether pid has exited (no such process, or a zombie).
func gone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// TestCredentialProviderRefusesItself: an entry whose --plugin names the
// wrapper's own link would run itself without end; it fails at once.
func TestCredentialProviderRefusesItself(t *testing.T) {
	n := newWrapperNode(t)
	args := cp.Wrapper{Plugin: cp.WrapperLink("plug"), RootDir: n.root}.ArgList()
	o := wait(t, start(t, filepath.Join(n.bin, cp.WrapperLink("plug")), args, wrapRequest))
	assert.Equal(t, 1, o.code)
	assert.Contains(t, string(o.stderr), "is pullguard itself")
	assert.Empty(t, o.stdout)
}
