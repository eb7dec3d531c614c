package kubelet

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mintedModes are the node as installed (installedModes), with the
// kubelet's credential provider configuration running the node's plugin
// through `pullguard credential-provider` (wrapped), and, for contrast,
// serve with the plugin not wrapped.
var mintedModes = []struct {
	mode
	wrapped bool
}{
	{mode: mode{name: gateMode + "/wrapped", kubeletGate: true, installed: true}, wrapped: true},
	{mode: mode{name: serveMode + "/wrapped", proxy: true, installed: true}, wrapped: true},
	{mode: mode{name: serveMode + "/not-wrapped", proxy: true, installed: true}},
}

// The node's account whose plugin mints a token per call, and its
// repositories.
const nodeMintUser = "node-mint"

// TestMintedNodeCredentials: the node's credential provider plugin mints
// a new token at every call, as ECR's does (the test plugin in -mode
// mint; the registry accepts every token it minted). A pod of no secret
// pulls the node account's image with the token the kubelet got, and
// another tenant's Never pod of it runs, under the kubelet's own gate as
// behind serve, when the kubelet runs the plugin through `pullguard
// credential-provider`, which announces the token's keyed hash to serve.
// Behind serve without the wrapper, serve never saw that token (its own
// run of the plugin got another), files the pull as the pod's, and the
// Never pod is refused.
func TestMintedNodeCredentials(t *testing.T) {
	bins, podLogs := prepare(t)
	plugins := t.TempDir()
	buildTestPlugin(t, filepath.Join(plugins, "pg-mint-plugin"))
	if bins.pullguard != "" {
		// What `pullguard install` links: <bin-dir>/pullguard-<plugin>.
		require.NoError(t, os.Symlink(bins.pullguard, filepath.Join(plugins, "pullguard-pg-mint-plugin")))
	}
	for _, m := range mintedModes {
		t.Run(m.name, func(t *testing.T) {
			if bins.pullguard == "" {
				t.Skip("skipped: " + bins.noServe)
			}
			mintedNodeCredentials(t, m.mode, m.wrapped, bins, podLogs, plugins)
		})
	}
}

// mintProvider is the kubelet's CredentialProviderConfig for the minting
// plugin: as written, or as credentialprovider.WrapProvider rewrites it
// (the same args as docs/serve.md shows, "Plugins that mint a token per
// call").
func mintProvider(reg, account, minted, rootDir string, wrapped bool) string {
	pluginArgs := []string{"-mode", "mint", "-account", account, "-minted", minted, "-auth-keys", reg, "-key-type", "Registry"}
	name, args := "pg-mint-plugin", pluginArgs
	if wrapped {
		name = "pullguard-pg-mint-plugin"
		args = append([]string{"credential-provider", "--plugin", "pg-mint-plugin", "--default-cache-duration", "10m0s",
			"--match-image", reg, "--root-dir", rootDir, "--"}, pluginArgs...)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: %s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: [%q]
  defaultCacheDuration: 10m
  args: [%s]
`, name, reg, strings.Join(quoted, ", "))
}

func mintedNodeCredentials(t *testing.T, m mode, wrapped bool, bins binaries, podLogs *[]string, plugins string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var nodeImage, minted string
	c := startCluster(t, ctx, m, bins, func(c *cluster) {
		c.reg.grant("alice", "team-a/")
		c.reg.grant("bob", "team-b/")
		c.reg.grant(nodeMintUser, "nodemint/")
		i, err := image(bins.pauseBytes, "nodemint/agent")
		require.NoError(t, err)
		nodeImage, err = push(ctx, c.reg, i, "nodemint/agent", "v1")
		require.NoError(t, err)

		dir := c.mkdir("plugin")
		account := filepath.Join(dir, "account")
		require.NoError(t, os.WriteFile(account, []byte(nodeMintUser+"\n"), 0o600))
		minted = filepath.Join(dir, "minted")
		c.reg.acceptMinted(minted)
		c.useProviders(mintProvider(c.reg.addr, account, minted, filepath.Join(c.dir, "pullguard"), wrapped), plugins)
	})
	w := twoTenants(t, ctx, c, podLogs)
	a, b := w.a, w.b

	w.step(t, "a pod of no secret pulls the node account's image with a minted token", func(t *testing.T) {
		from := w.mark(t)
		w.runs(t, pod(a.ns, "mint-1", nodeImage, ifNotPresent, noSecret))
		tr := w.since(t, from, "nodemint/agent")
		assert.Positive(t, tr.manifestOK, "the registry granted a minted token")
		assert.Positive(t, tr.blobs, "the layers came down")
		assert.NotEmpty(t, mintedTokens(t, minted), "the plugin minted")
	})
	if !wrapped {
		w.step(t, "serve never saw the kubelet's token: another tenant's Never pod is refused", func(t *testing.T) {
			w.neverPulled(t, pod(b.ns, "mint-never", nodeImage, never, noSecret))
		})
		return
	}
	w.step(t, "another tenant's Never pod of it runs", func(t *testing.T) {
		w.freeRun(t, pod(b.ns, "mint-never", nodeImage, never, noSecret))
	})
	w.step(t, "another tenant's IfNotPresent pod of it runs with no registry request", func(t *testing.T) {
		w.freeRun(t, pod(b.ns, "mint-ifnotpresent", nodeImage, ifNotPresent, noSecret))
	})
	if !m.proxy {
		return
	}
	w.step(t, "serve recorded the announced token as the plugin's node credential, never the token itself", func(t *testing.T) {
		log := c.pgOut.from(0)
		assert.True(t, slices.ContainsFunc(log, func(l string) bool {
			return strings.Contains(l, "node (pg-mint-plugin)") && strings.Contains(l, "nodemint/agent")
		}), "serve's log records the pull with the plugin as its source")
		for _, tok := range mintedTokens(t, minted) {
			basic := base64.StdEncoding.EncodeToString([]byte(nodeMintUser + ":" + tok))
			for _, l := range log {
				require.NotContains(t, l, tok)
				require.NotContains(t, l, basic)
			}
		}
		entries, err := filepath.Glob(filepath.Join(c.dir, "pullguard", "node-credentials", "*.json"))
		require.NoError(t, err)
		assert.NotEmpty(t, entries, "the wrapper announced")
		for _, e := range entries {
			data, err := os.ReadFile(e)
			require.NoError(t, err)
			for _, tok := range mintedTokens(t, minted) {
				assert.NotContains(t, string(data), tok, "an announcement holds a keyed hash, not the token")
			}
		}
	})
}

// mintedTokens are the passwords the plugin minted.
func mintedTokens(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Fields(string(data)) {
		if _, p, ok := strings.Cut(l, ":"); ok {
			out = append(out, p)
		}
	}
	return out
}
