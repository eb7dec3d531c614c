package kubelet

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// installedModes are the node as the install sets it up: the kubelet's
// configuration with deploy/kubelet/config-snippet.yaml merged in, its own
// gate on, or off with serve started exactly as
// deploy/systemd/pullguard.service starts it.
var installedModes = []mode{
	{name: gateMode, kubeletGate: true, installed: true},
	{name: "kubelet-gate-off/pullguard-serve-as-installed", proxy: true, installed: true},
}

// TestInstalledNode: the install (deploy/) on a node whose registry
// accounts are the node's own (issue 20). The kubelet starts with the
// snippet, gate on or off; serve, started as the unit starts it, protects:
// tenant B is refused tenant A's image. An image pulled with the node's
// credentials is free to every pod, under the kubelet's own gate and
// behind serve alike. The node holds two registry accounts: one in
// config.json in the kubelet's root directory, one given by a
// credential-provider plugin (the project's test plugin, in the kubelet's
// provider configuration, which serve reads from the same file). Pods of
// no secret pull each account's image; another tenant's Never pod and a
// runAsNonRoot pod of it run; an account added to config.json while serve
// runs (the kubelet restarted, serve not) frees its image as under the
// gate; a config.json key registry-1.docker.io holding tenant A's own
// account frees none of tenant A's docker.io images (containerd's pulls of
// docker.io go to the test's registry); with the registry stopped, new
// pods of both still run and the kubelet pulls nothing.
func TestInstalledNode(t *testing.T) {
	bins, podLogs := prepare(t)
	plugins := t.TempDir()
	buildTestPlugin(t, filepath.Join(plugins, "pg-test-plugin"))
	for _, m := range installedModes {
		t.Run(m.name, func(t *testing.T) {
			if m.proxy && bins.pullguard == "" {
				t.Skip("skipped: " + bins.noServe)
			}
			nodeCredentials(t, m, bins, podLogs, plugins)
		})
	}
}

// buildTestPlugin builds pkg/credentialprovider's test plugin to bin.
func buildTestPlugin(t *testing.T, bin string) {
	src := filepath.Join("..", "..")
	if s := os.Getenv("PULLGUARD_E2E_SOURCE"); s != "" {
		src = s
	}
	cmd := exec.Command("go", "build", "-o", bin, "./pkg/credentialprovider/testdata/plugin")
	cmd.Dir = src
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build the test plugin: %s", out)
}

// useProviders writes the kubelet's credential provider configuration
// and names it, with the plugins' bin directory, on the kubelet's command
// line and, behind serve, on serve's: they read the same file.
func (c *cluster) useProviders(config, bin string) {
	providers := filepath.Join(c.dir, "credential-providers.yaml")
	require.NoError(c.t, os.WriteFile(providers, []byte(config), 0o644))
	flags := []string{"--image-credential-provider-config", providers, "--image-credential-provider-bin-dir", bin}
	c.mode.kubeletArgs = append(c.mode.kubeletArgs, flags...)
	if c.mode.proxy {
		c.mode.serveArgs = append(c.mode.serveArgs, flags...)
	}
}

// twoTenants is the world of the running node c with tenants A (alice,
// team-a) and B (bob, team-b); the pods' logs are kept with podLogs.
func twoTenants(t *testing.T, ctx context.Context, c *cluster, podLogs *[]string) *world {
	*podLogs = append(*podLogs, c.dir+"/pod-logs")
	w := &world{ctx: ctx, c: c}
	var err error
	w.a, err = c.newTenant(ctx, "team-a", "alice")
	require.NoError(t, err)
	w.b, err = c.newTenant(ctx, "team-b", "bob")
	require.NoError(t, err)
	return w
}

// The node's accounts and their repositories.
const (
	nodeFileUser   = "node-file"   // in the kubelet's config.json
	nodePluginUser = "node-plugin" // given by the plugin
	// nodeLateUser is added to config.json while serve runs.
	nodeLateUser = "node-late"
)

// hubImage is tenant A's private image on Docker Hub, as a pod names it:
// containerd's pulls of docker.io go to the test's registry
// (containerd.routeRegistry), under team-a/hub.
const hubImage = "docker.io/team-a/hub:v1"

// nodeKey is one entry of the node's config.json: an account filed
// under a key.
type nodeKey struct{ key, user string }

// writeNodeConfig writes the node's docker config where the kubelet looks
// first, its root directory, with each account's password as `docker
// login` writes it ("auth").
func (c *cluster) writeNodeConfig(t *testing.T, keys ...nodeKey) {
	var entries []string
	for _, k := range keys {
		auth := base64.StdEncoding.EncodeToString([]byte(k.user + ":" + c.reg.password(k.user)))
		entries = append(entries, fmt.Sprintf(`%q:{"auth":%q}`, k.key, auth))
	}
	cfg := `{"auths":{` + strings.Join(entries, ",") + `}}`
	require.NoError(t, os.WriteFile(filepath.Join(c.mkdir("kubelet"), "config.json"), []byte(cfg), 0o600))
}

func nodeCredentials(t *testing.T, m mode, bins binaries, podLogs *[]string, plugins string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var fileImage, pluginImage, appImage, lateImage string
	c := startCluster(t, ctx, m, bins, func(c *cluster) {
		c.reg.grant("alice", "team-a/")
		c.reg.grant("bob", "team-b/")
		c.reg.grant(nodeFileUser, "nodefile/")
		c.reg.grant(nodePluginUser, "nodeplugin/")
		c.reg.grant(nodeLateUser, "nodelate/")
		c.reg.setUser(nodeFileUser, newSecret(nodeFileUser))
		c.reg.setUser(nodePluginUser, newSecret(nodePluginUser))
		c.reg.setUser(nodeLateUser, newSecret(nodeLateUser))
		publish := func(repo string) string {
			i, err := image(bins.pauseBytes, repo)
			require.NoError(t, err)
			i, err = runAs(i, strconv.Itoa(imageUID))
			require.NoError(t, err)
			ref, err := push(ctx, c.reg, i, repo, "v1")
			require.NoError(t, err)
			return ref
		}
		fileImage, pluginImage = publish("nodefile/agent"), publish("nodeplugin/agent")
		appImage, lateImage = publish("team-a/app"), publish("nodelate/agent")
		publish("team-a/hub") // hubImage
		require.NoError(t, c.ctrd.routeRegistry("docker.io", c.reg.addr))

		// The node's docker config, where the kubelet looks first: its
		// root directory.
		c.writeNodeConfig(t, nodeKey{c.reg.addr, nodeFileUser})

		// The plugin, as the kubelet's provider configuration names it.
		account := filepath.Join(c.mkdir("plugin"), "account")
		require.NoError(t, os.WriteFile(account, []byte(nodePluginUser+":"+c.reg.password(nodePluginUser)+"\n"), 0o600))
		c.useProviders(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: pg-test-plugin
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: [%q]
  defaultCacheDuration: 10m
  args: [-mode, account, -account, %q, -auth-keys, %q]
`, c.reg.addr, account, c.reg.addr), plugins)
	})
	w := twoTenants(t, ctx, c, podLogs)
	a, b := w.a, w.b

	if m.proxy {
		w.step(t, "serve says it protects", func(t *testing.T) {
			resp, err := http.Get("http://" + c.pgMetrics + "/healthz")
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.True(t, strings.HasPrefix(string(body), "ok: protecting"), "/healthz: %q", body)
		})
	}
	w.step(t, "pullguard doctor on this node", func(t *testing.T) {
		args := []string{"doctor",
			"--kubelet-config", filepath.Join(c.dir, "kubelet-config.yaml"),
			"--kubelet-flags-files", filepath.Join(c.dir, "no-flags-file"),
			"--serve-socket", "unix://" + c.pgSocket(),
			"--root-dir", filepath.Join(c.dir, "pullguard")}
		if m.proxy {
			args = append(args, "--serve-metrics-address", c.pgMetrics)
		}
		out, err := exec.CommandContext(ctx, bins.pullguard, args...).CombinedOutput()
		if m.proxy {
			// The install as shipped: nothing to change.
			assert.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "0 problem(s)")
		} else {
			// This kubelet asks containerd: doctor says so, with the line
			// to change.
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			assert.Equal(t, 1, exit.ExitCode())
			assert.Regexp(t, `PROBLEM +image-service-endpoint`, string(out))
		}
		t.Logf("pullguard doctor:\n%s", out)
	})
	w.step(t, "tenant A pulls its private image; tenant B is refused", func(t *testing.T) {
		w.runs(t, pod(a.ns, "app-1", appImage, ifNotPresent, withSecret))
		from := w.mark(t)
		w.create(t, pod(b.ns, "intruder", appImage, ifNotPresent, noSecret))
		o, err := c.await(ctx, b.ns, "intruder", func(outcome) bool { return true })
		require.NoError(t, err)
		assert.Contains(t, []string{"ErrImagePull", "ImagePullBackOff"}, o.state, o.message)
		tr := w.since(t, from, "team-a/app")
		assert.Zero(t, tr.manifestOK, "the registry granted no manifest (the node's accounts may not read team-a/)")
		assert.Zero(t, tr.blobs)
		require.NoError(t, c.remove(ctx, b.ns, "intruder"))
		w.neverPulled(t, pod(b.ns, "intruder-never", appImage, never, noSecret))
	})
	for _, src := range []struct{ name, image, repo string }{
		{"config.json", fileImage, "nodefile/agent"},
		{"plugin", pluginImage, "nodeplugin/agent"},
	} {
		w.step(t, src.name+": a pod of no secret pulls the node account's image", func(t *testing.T) {
			from := w.mark(t)
			w.runs(t, pod(a.ns, src.name+"-1", src.image, ifNotPresent, noSecret))
			tr := w.since(t, from, src.repo)
			assert.Positive(t, tr.manifestOK, "the registry granted the node's account")
			assert.Positive(t, tr.blobs, "the layers came down")
		})
		w.step(t, src.name+": another tenant's Never pod of it runs", func(t *testing.T) {
			w.freeRun(t, pod(b.ns, src.name+"-never", src.image, never, noSecret))
		})
		w.step(t, src.name+": a runAsNonRoot pod of it runs as the image's user", func(t *testing.T) {
			name := src.name + "-nonroot"
			w.freeRun(t, runAsNonRoot(pod(b.ns, name, src.image, ifNotPresent, noSecret)))
			assert.EqualValues(t, imageUID, w.processUID(t, b.ns, name))
		})
	}
	w.step(t, "node credentials added while serve runs: the kubelet restarted, serve not", func(t *testing.T) {
		// serve has read config.json (a pull of the node file's image
		// asks its node keyring, here or in a step before).
		w.runs(t, pod(a.ns, "late-0", fileImage, ifNotPresent, noSecret))
		// An operator adds an account the usual way: config.json in the
		// kubelet's root directory, then a kubelet restart, which reads
		// it. serve is not restarted.
		c.writeNodeConfig(t, nodeKey{c.reg.addr, nodeFileUser}, nodeKey{c.reg.addr + "/nodelate", nodeLateUser})
		c.restartKubelet(ctx)
		from := w.mark(t)
		w.runs(t, pod(a.ns, "late-1", lateImage, ifNotPresent, noSecret))
		tr := w.since(t, from, "nodelate/agent")
		assert.Positive(t, tr.manifestOK, "the registry granted the added account")
		assert.Positive(t, tr.blobs, "the layers came down")
		// The pull was the node's, as under the kubelet's gate: another
		// tenant's Never pod of the image runs.
		w.freeRun(t, pod(b.ns, "late-never", lateImage, never, noSecret))
	})
	w.step(t, "a node key registry-1.docker.io holding tenant A's account frees no docker.io image", func(t *testing.T) {
		// Tenant A's secret for Docker Hub, under the key docker login
		// writes; the node's config.json holds the same account under
		// registry-1.docker.io, which the kubelet gives for no
		// docker.io/... image (so its restart is not needed to show it;
		// serve reads the file again at its next look-up).
		require.NoError(t, c.pullSecretFor(ctx, a, "hubcred", "https://index.docker.io/v1/"))
		c.writeNodeConfig(t, nodeKey{c.reg.addr, nodeFileUser}, nodeKey{c.reg.addr + "/nodelate", nodeLateUser}, nodeKey{"registry-1.docker.io", a.user})
		p := pod(a.ns, "hub-1", hubImage, ifNotPresent, noSecret)
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "hubcred"}}
		from := w.mark(t)
		w.runs(t, p)
		tr := w.since(t, from, "team-a/hub")
		assert.Positive(t, tr.manifestOK, "the registry granted tenant A's account, through containerd's hosts.toml for docker.io")
		// Filed as tenant A's, as under the kubelet's gate: tenant B's
		// Never pod is refused.
		w.neverPulled(t, pod(b.ns, "hub-never", hubImage, never, noSecret))
	})
	w.step(t, "with the registry stopped, new pods of both images run", func(t *testing.T) {
		pulls := func() float64 {
			n, err := c.kubeletMetric(ctx, "kubelet_runtime_operations_total", map[string]string{"operation_type": "pull_image"})
			require.NoError(t, err)
			return n
		}
		before := pulls()
		c.reg.close()
		for i, img := range []string{fileImage, pluginImage} {
			name := "outage-" + strconv.Itoa(i)
			w.runs(t, pod(b.ns, name, img, ifNotPresent, noSecret))
			_, err := c.awaitEvent(ctx, b.ns, name, "Pulled", "already present on machine")
			assert.NoError(t, err)
		}
		assert.Equal(t, before, pulls(), "the kubelet pulled nothing: the images are free to every pod")
	})
	if m.proxy {
		w.step(t, "no node credential in serve's log", func(t *testing.T) {
			for _, user := range []string{nodeFileUser, nodePluginUser, nodeLateUser} {
				pw := c.reg.password(user)
				basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
				for _, l := range c.pgOut.from(0) {
					require.NotContains(t, l, pw)
					require.NotContains(t, l, basic)
				}
			}
		})
	}
}
