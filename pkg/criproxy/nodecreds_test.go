package criproxy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/featuregates"
	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/credential"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// Node credentials as the kubelet holds them: the node's docker config
// (config.json in its root directory) and credential provider plugins.
// The kubelet sends a node credential in PullImage exactly as a pull
// secret's (username and password); serve must tell them apart itself.

const (
	regB     = "127.0.0.1:5001"
	nodeUser = "node-puller"
	nodePass = "pw-node-3c9d1e"
	// tenantPass is another account's password on the node's registry.
	tenantPass = "pw-tenant-8a2f47"
)

// nodeEnv is a harness whose proxy knows the node docker config under a
// temporary kubelet root directory, and captures its logs.
type nodeEnv struct {
	*harness
	root  string
	clock *testingclock.FakePassiveClock
	logs  *syncBuffer
}

// dockerConfig is a config.json whose "auths" maps each key to
// user:password, written the way `docker login` writes it ("auth").
func dockerConfig(entries map[string]string) []byte {
	var parts []string
	for k, up := range entries {
		parts = append(parts, fmt.Sprintf("%q:{%q:%q}", k, "auth", base64.StdEncoding.EncodeToString([]byte(up))))
	}
	return []byte(`{"auths":{` + strings.Join(parts, ",") + `}}`)
}

func testKeyHasher(t testing.TB) *credential.Hasher {
	h, err := credential.NewHasher(bytes.Repeat([]byte{9}, credential.KeySize))
	require.NoError(t, err)
	return h
}

// newNodeEnv starts a proxy with the node keyring of config (written to
// <root>/config.json; nil: no file) and extra, merged after it.
func newNodeEnv(t *testing.T, config []byte, extra keyring.Keyring, timeout time.Duration) *nodeEnv {
	t.Helper()
	e := &nodeEnv{root: t.TempDir(), clock: testingclock.NewFakePassiveClock(time.Unix(1_800_000_000, 0)), logs: &syncBuffer{}}
	if config != nil {
		e.writeConfig(t, config)
	}
	files := keyring.DefaultNodeConfigFiles(e.root)[:1] // the kubelet's root dir only: the machine's own files stay out of the test
	// The node keyring's own hashes are never compared: the proxy hashes
	// what it gives with the tracker's key.
	node := keyring.Merge(keyring.CachedNodeKeyring(testKeyHasher(t), files, e.clock, nil), extra)
	logger := funcr.New(func(prefix, args string) { fmt.Fprintln(e.logs, prefix, args) }, funcr.Options{Verbosity: 10})
	e.harness = newHarness(t, harnessConfig{serverOpts: []criproxy.Option{criproxy.WithNodeKeyring(node, timeout), criproxy.WithLogger(logger)}})
	return e
}

func (e *nodeEnv) writeConfig(t *testing.T, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(e.root, keyring.ConfigJSONFile), data, 0o600))
}

// nodeAccessible says whether the records hold image's repository as free
// to every pod.
func (e *nodeEnv) nodeAccessible(t *testing.T, image string) bool {
	t.Helper()
	repo, _, _ := strings.Cut(image, ":v")
	for _, r := range e.tracker.Records() {
		if rr := r.Repositories[repo]; rr != nil {
			return rr.NodeAccessible
		}
	}
	t.Fatalf("no record of %s", repo)
	return false
}

// assertNoLeak checks the proxy's logs and records for every form of the
// secrets.
func (e *nodeEnv) assertNoLeak(t *testing.T, secrets ...string) {
	t.Helper()
	assert.Empty(t, leak.Scan(map[string]string{"log": e.logs.String(), "records": fmt.Sprintf("%+v", e.tracker.Records())}, secrets...), "a credential got out")
}

// TestNodeCredentialMakesImagesNodeAccessible: a pull with the node's own
// credential is recorded as the kubelet records it, node-accessible, so
// another tenant's Never pod and a static pod get the image; anything
// that is not the node's credential for that image stays the pod's.
func TestNodeCredentialMakesImagesNodeAccessible(t *testing.T) {
	tests := []struct {
		name   string
		config map[string]string
		image  string
		// user and pass are what the kubelet sends (the pod's secret, or
		// the node's credential when the pod has none).
		user, pass string
		wantNode   bool
	}{
		{name: "a pod with no secret: the kubelet sends the node's credential", config: map[string]string{reg: nodeUser + ":" + nodePass}, image: reg + "/team-a/app:v1", user: nodeUser, pass: nodePass, wantNode: true},
		{name: "a tenant's secret holding exactly the node's credential", config: map[string]string{"http://" + reg: nodeUser + ":" + nodePass}, image: reg + "/team-a/app:v1", user: nodeUser, pass: nodePass, wantNode: true},
		{name: "another account on the node's registry", config: map[string]string{reg: nodeUser + ":" + nodePass}, image: reg + "/team-a/app:v1", user: "tenant", pass: tenantPass},
		{name: "the node's username with another password", config: map[string]string{reg: nodeUser + ":" + nodePass}, image: reg + "/team-a/app:v1", user: nodeUser, pass: tenantPass},
		{name: "the node's credential for reg-a, presented to reg-b", config: map[string]string{reg: nodeUser + ":" + nodePass}, image: regB + "/team-a/app:v1", user: nodeUser, pass: nodePass},
		{name: "the node's credential for another path of the registry", config: map[string]string{reg + "/team-b": nodeUser + ":" + nodePass}, image: reg + "/team-a/app:v1", user: nodeUser, pass: nodePass},
		{name: "no node config at all", image: reg + "/team-a/app:v1", user: nodeUser, pass: nodePass},
		// Node keys are matched as the kubelet matches them: a key the
		// kubelet gives no image's credential for frees nothing.
		{name: "a node key registry-1.docker.io holding the tenant's account, for a docker.io image", config: map[string]string{"registry-1.docker.io": "tenant:" + tenantPass}, image: "docker.io/team-a/app:v1", user: "tenant", pass: tenantPass},
		{name: "a node key of another case", config: map[string]string{"Node.Example:5000": "tenant:" + tenantPass}, image: "node.example:5000/team-a/app:v1", user: "tenant", pass: tenantPass},
		{name: "the node's key for docker.io", config: map[string]string{"docker.io": nodeUser + ":" + nodePass}, image: "docker.io/team-a/app:v1", user: nodeUser, pass: nodePass, wantNode: true},
		{name: "the node's Docker Hub key, the fallback of every docker.io image", config: map[string]string{"https://index.docker.io/v1/": nodeUser + ":" + nodePass}, image: "docker.io/team-a/app:v1", user: nodeUser, pass: nodePass, wantNode: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var config []byte
			if tc.config != nil {
				config = dockerConfig(tc.config)
			}
			e := newNodeEnv(t, config, nil, 0)
			e.fake.publish(t, tc.image, id(1), tc.user+":"+tc.pass)
			_, err := e.newPod("team-a", nil).ensure(t, tc.image, tc.user, tc.pass)
			require.NoError(t, err)
			assert.Equal(t, tc.wantNode, e.nodeAccessible(t, tc.image))

			never := e.newPod("team-b", nil)
			static := e.newPod("kube-system", map[string]string{"kubernetes.io/config.hash": "static-hash"})
			static.ann["kubernetes.io/config.source"] = "file"
			if tc.wantNode {
				assert.Equal(t, id(1), never.presence(t, tc.image), "another tenant's Never pod gets the node-accessible image")
				assert.Equal(t, id(1), static.presence(t, tc.image), "a static pod gets it with no pull")
			} else {
				assert.Empty(t, never.presence(t, tc.image), "another tenant's Never pod does not get a tenant's image")
				assert.Empty(t, static.presence(t, tc.image), "nor does a static pod: it pulls with the node's credential")
			}
			e.assertNoLeak(t, nodePass, tenantPass)
		})
	}
}

// TestNodeCredentialRotation: serve reads the node's docker config again
// at the first pull after it changed (the kubelet reads it when it
// starts): the replaced credential is no longer the node's, the new one
// is.
func TestNodeCredentialRotation(t *testing.T) {
	const newPass = "pw-node-rotated-61be0c"
	e := newNodeEnv(t, dockerConfig(map[string]string{reg: nodeUser + ":" + nodePass}), nil, 0)
	for i, image := range []string{reg + "/a/one:v1", reg + "/a/two:v1", reg + "/a/three:v1"} {
		e.fake.publish(t, image, id(i+1), nodeUser+":"+nodePass, nodeUser+":"+newPass)
	}
	pull := func(image, pass string) bool {
		t.Helper()
		_, err := e.newPod("team-a", nil).ensure(t, image, nodeUser, pass)
		require.NoError(t, err)
		return e.nodeAccessible(t, image)
	}
	assert.True(t, pull(reg+"/a/one:v1", nodePass), "the node's credential")

	e.writeConfig(t, dockerConfig(map[string]string{reg: nodeUser + ":" + newPass}))
	assert.False(t, pull(reg+"/a/two:v1", nodePass), "read again at once: the old credential is no longer the node's")
	assert.True(t, pull(reg+"/a/three:v1", newPass), "the new one is")
	e.assertNoLeak(t, nodePass, newPass)
}

// TestNodeKeyringFailureFailsClosed: a node keyring that fails or hangs
// never fails the pull: the credential is filed as the pod's, and the
// failure is logged once, without the credential.
func TestNodeKeyringFailureFailsClosed(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tests := []struct {
		name string
		kr   keyring.Keyring
	}{
		{name: "fails", kr: keyring.Func(func(context.Context, string) ([]credential.Credential, error) {
			return nil, errors.New("plugin ecr-credential-provider: exit status 1")
		})},
		{name: "hangs", kr: keyring.Func(func(ctx context.Context, _ string) ([]credential.Credential, error) {
			<-release
			return nil, ctx.Err()
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newNodeEnv(t, nil, tc.kr, 20*time.Millisecond)
			for i, image := range []string{reg + "/a/one:v1", reg + "/a/two:v1"} {
				e.fake.publish(t, image, id(i+1), nodeUser+":"+nodePass)
				_, err := e.newPod("team-a", nil).ensure(t, image, nodeUser, nodePass)
				require.NoError(t, err, "the pull does not fail")
				assert.False(t, e.nodeAccessible(t, image), "filed as the pod's")
			}
			assert.Equal(t, 1, strings.Count(e.logs.String(), "Could not tell whether a pull's credential is the node's: filing it as the pod's until"), "logged once")
			e.assertNoLeak(t, nodePass)
		})
	}
}

// buildTestPlugin builds package credentialprovider's test plugin into
// dir under each of names.
func buildTestPlugin(t *testing.T, dir string, names ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", filepath.Join(dir, names[0]), "../credentialprovider/testdata/plugin").CombinedOutput()
	require.NoError(t, err, "building the test plugin: %s", out)
	for _, n := range names[1:] {
		require.NoError(t, os.Symlink(filepath.Join(dir, names[0]), filepath.Join(dir, n)))
	}
}

// TestNodePluginCredentials: serve runs the kubelet's credential provider
// plugins from the kubelet's own provider config. A plugin's answer is a
// node credential, unless the plugin uses service account tokens: such a
// plugin is never run for the node.
func TestNodePluginCredentials(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	buildTestPlugin(t, bin, "node-plugin", "sa-plugin", "crash-plugin", "hang-plugin", "fixed-plugin")
	runs := func(name string) string { return filepath.Join(dir, name+".runs") }
	provider := func(name string, extra ...string) string {
		args := append([]string{"-record", runs(name), "-auth-keys", "{registry}"}, extra...)
		return fmt.Sprintf(`
  - name: %s
    matchImages: [%q]
    defaultCacheDuration: 1h
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: ["%s"]`, name, reg, strings.Join(args, `", "`))
	}
	const saProvider = `
    tokenAttributes:
      serviceAccountTokenAudience: registry
      cacheType: ServiceAccount
      requireServiceAccount: false`
	account := filepath.Join(dir, "account")
	require.NoError(t, os.WriteFile(account, []byte(nodeUser+":"+nodePass+"\n"), 0o600))
	image := reg + "/team-a/app:v1"
	// The test plugin answers "user:<registry>" and "pass:<repository>".
	user, pass := "user:"+reg, "pass:"+reg+"/team-a/app"

	tests := []struct {
		name      string
		providers string
		// kubeletUser and kubeletPass are what the kubelet's own run of
		// the plugin gave it (a token-minting plugin gives each run
		// another password); kubeletUser "" is the derived user.
		kubeletUser, kubeletPass string
		wantNode                 bool
		// wantRuns are the plugins run (nil: not checked, the run may not
		// have started when the pull stops waiting).
		wantRuns []string
		// timeout is how long the pull waits for the node keyring: long
		// enough for any answer, or short for a plugin that never answers.
		timeout time.Duration
	}{
		{name: "the plugin's credential", providers: provider("sa-plugin", "-mode", "echo-sa") + saProvider + provider("node-plugin"), kubeletPass: pass, wantNode: true, wantRuns: []string{"node-plugin"}},
		{name: "a static account served by a plugin", providers: provider("fixed-plugin", "-mode", "account", "-account", account), kubeletUser: nodeUser, kubeletPass: nodePass, wantNode: true, wantRuns: []string{"fixed-plugin"}},
		{name: "a token minted for the kubelet's run, not serve's", providers: provider("node-plugin"), kubeletPass: "pass:minted-for-the-kubelet", wantRuns: []string{"node-plugin"}},
		{name: "a plugin that fails", providers: provider("crash-plugin", "-mode", "crash"), kubeletPass: pass, wantRuns: []string{"crash-plugin"}},
		{name: "a plugin that hangs", providers: provider("hang-plugin", "-mode", "hang", "-pidfile", filepath.Join(dir, "hang.pid")), kubeletPass: pass, timeout: 50 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []string{"node-plugin", "sa-plugin", "crash-plugin", "hang-plugin", "fixed-plugin"} {
				_ = os.Remove(runs(n))
			}
			cfgPath := filepath.Join(t.TempDir(), "provider-config.yaml")
			require.NoError(t, os.WriteFile(cfgPath, []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:"+tc.providers+"\n"), 0o600))
			cfg, err := cp.LoadConfig(cfgPath)
			require.NoError(t, err)
			m, err := cp.NewManager(cfg.NodeProviders(), bin, testKeyHasher(t), cp.WithGates(featuregates.Gates{ServiceAccountTokenForCredentialProviders: true}))
			require.NoError(t, err)
			t.Cleanup(m.Close)

			timeout := tc.timeout
			if timeout == 0 {
				timeout = time.Hour
			}
			e := newNodeEnv(t, nil, m.ForNode(), timeout)
			kubeletUser := tc.kubeletUser
			if kubeletUser == "" {
				kubeletUser = user
			}
			e.fake.publish(t, image, id(1), kubeletUser+":"+tc.kubeletPass)
			_, err = e.newPod("team-a", nil).ensure(t, image, kubeletUser, tc.kubeletPass)
			require.NoError(t, err, "the pull never fails for the node keyring")
			assert.Equal(t, tc.wantNode, e.nodeAccessible(t, image))
			if tc.wantNode {
				assert.Equal(t, id(1), e.newPod("team-b", nil).presence(t, image), "another tenant's Never pod gets the image")
			}
			e.assertNoLeak(t, pass, tc.kubeletPass)
			if tc.wantRuns == nil {
				return
			}
			var ran []string
			for _, n := range []string{"node-plugin", "sa-plugin", "crash-plugin", "hang-plugin", "fixed-plugin"} {
				if _, err := os.Stat(runs(n)); err == nil {
					ran = append(ran, n)
				}
			}
			assert.Equal(t, tc.wantRuns, ran, "the plugins run for the node")
		})
	}
}

// TestStaticPodPullsWithTheNodeCredential: a static pod (config.source
// "file", no pull secret) is pulled with the node's credential; the image
// is then every pod's, as under the kubelet.
func TestStaticPodPullsWithTheNodeCredential(t *testing.T) {
	image := reg + "/kube-system/proxy:v1"
	e := newNodeEnv(t, dockerConfig(map[string]string{reg: nodeUser + ":" + nodePass}), nil, 0)
	e.fake.publish(t, image, id(1), nodeUser+":"+nodePass)
	static := e.newPod("kube-system", map[string]string{"kubernetes.io/config.hash": "0123abcd"})
	static.ann["kubernetes.io/config.source"] = "file"
	ref, err := static.ensure(t, image, nodeUser, nodePass)
	require.NoError(t, err)
	assert.Equal(t, id(1), ref)
	assert.True(t, e.nodeAccessible(t, image))
	_, _, pulls := e.fake.counts()
	assert.Equal(t, id(1), e.newPod("team-b", nil).presence(t, image), "another tenant's Never pod gets it")
	_, _, after := e.fake.counts()
	assert.Equal(t, pulls, after, "with no pull")
	e.assertNoLeak(t, nodePass)
}

// TestNodeLookupRunsBesideThePull: the node keyring (a plugin run, say) is
// asked beside the pull, not before it: here it can answer only once the
// runtime's pull has begun, and the pull's credential is still found to be
// the node's. Asked before the pull, the look-up would wait out its limit
// and the image would be filed as the pod's.
func TestNodeLookupRunsBesideThePull(t *testing.T) {
	pulling := make(chan struct{})
	kr := keyring.Func(func(ctx context.Context, _ string) ([]credential.Credential, error) {
		select {
		case <-pulling:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []credential.Credential{{Registry: reg, Auth: credential.AuthConfig{Username: nodeUser, Password: nodePass},
			Source: credential.Source{Kind: credential.SourceNode, Name: "slow-plugin"}}}, nil
	})
	e := newNodeEnv(t, nil, kr, 5*time.Second)
	entered := make(chan string, 1)
	e.fake.mu.Lock()
	e.fake.entered = entered
	e.fake.mu.Unlock()
	go func() {
		<-entered
		close(pulling)
	}()
	image := reg + "/team-a/app:v1"
	e.fake.publish(t, image, id(1), nodeUser+":"+nodePass)

	_, err := e.newPod("team-a", nil).ensure(t, image, nodeUser, nodePass)

	require.NoError(t, err)
	assert.True(t, e.nodeAccessible(t, image), "the look-up that finished during the pull found the node's credential")
	assert.NotContains(t, e.logs.String(), "Could not tell whether a pull's credential is the node's")
	e.assertNoLeak(t, nodePass)
}
