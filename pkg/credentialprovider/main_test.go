package credentialprovider_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/featuregates"
	"github.com/pullguard/pullguard/pkg/credential"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// The test plugin (testdata/plugin) is built once, on first use, into a
// directory that TestMain removes. Building lazily keeps fuzz workers,
// which never run a plugin, fast to start.
var (
	pluginOnce  sync.Once
	pluginDir   string
	pluginPath  string
	pluginBuild error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pluginDir != "" {
		_ = os.RemoveAll(pluginDir)
	}
	os.Exit(code)
}

// pluginBinary returns the built test plugin.
func pluginBinary(t testing.TB) string {
	t.Helper()
	pluginOnce.Do(func() {
		pluginDir, pluginBuild = os.MkdirTemp("", "credentialprovider-test-")
		if pluginBuild != nil {
			return
		}
		pluginPath = filepath.Join(pluginDir, "testplugin")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out, err := exec.Command(goTool, "build", "-o", pluginPath, "./testdata/plugin").CombinedOutput()
		if err != nil {
			pluginBuild = fmt.Errorf("building the test plugin: %w\n%s", err, out)
		}
	})
	require.NoError(t, pluginBuild)
	return pluginPath
}

// testHasher returns a hasher with a fixed key.
func testHasher(t testing.TB) *credential.Hasher {
	t.Helper()
	h, err := credential.NewHasher(bytes.Repeat([]byte{7}, credential.KeySize))
	require.NoError(t, err)
	return h
}

// env is one test's plugin bin directory, record file and fake clock.
type env struct {
	binDir string
	record string
	clock  *clocktesting.FakeClock
	hasher *credential.Hasher
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(binDir, 0o755))
	return &env{
		binDir: binDir,
		record: filepath.Join(dir, "runs.log"),
		clock:  clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		hasher: testHasher(t),
	}
}

// install makes the test plugin available under name.
func (e *env) install(t testing.TB, name string) {
	t.Helper()
	require.NoError(t, os.Symlink(pluginBinary(t), filepath.Join(e.binDir, name)))
}

// provider returns a v1 provider for the test plugin with args, recording
// its runs in the env's record file.
func (e *env) provider(name string, match []string, defaultCache time.Duration, args ...string) cp.Provider {
	return cp.Provider{
		Name:                 name,
		MatchImages:          match,
		DefaultCacheDuration: defaultCache,
		APIVersion:           "credentialprovider.kubelet.k8s.io/v1",
		Args:                 append([]string{"-record", e.record}, args...),
	}
}

// manager installs every provider's plugin and returns a Manager on the
// env's fake clock; it is closed when the test ends.
func (e *env) manager(t testing.TB, providers []cp.Provider, opts ...cp.Option) *cp.Manager {
	t.Helper()
	for i := range providers {
		e.install(t, providers[i].Name)
		providers[i].Index = i
	}
	opts = append([]cp.Option{cp.WithClock(e.clock), cp.WithGates(featuregates.Gates{ServiceAccountTokenForCredentialProviders: true})}, opts...)
	m, err := cp.NewManager(&cp.Config{Providers: providers}, e.binDir, e.hasher, opts...)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// runs returns the images of the recorded plugin runs.
func (e *env) runs(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(e.record)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}

// wantCred describes an expected credential without holding test secrets
// in assertion arguments: credentials are compared with == and only their
// index and non-secret fields appear in failure messages.
type wantCred struct {
	user, pass string
	registry   string
	source     credential.Source
}

func assertCreds(t *testing.T, h *credential.Hasher, got []credential.Credential, want []wantCred) {
	t.Helper()
	if !assert.Len(t, got, len(want), "number of credentials") {
		return
	}
	for i, w := range want {
		g := got[i]
		auth := credential.AuthConfig{Username: w.user, Password: w.pass}
		assert.True(t, g.Auth == auth, "credential %d: auth differs from the expected one", i)
		assert.Equal(t, w.registry, g.Registry, "credential %d registry", i)
		assert.Equal(t, w.source, g.Source, "credential %d source", i)
		assert.True(t, h.Hash(w.registry, auth) == g.Hash, "credential %d: hash is not hasher.Hash(registry, auth)", i)
	}
}

func nodeSource(name string) credential.Source {
	return credential.Source{Kind: credential.SourceNode, Name: name}
}

var bg = context.Background()
