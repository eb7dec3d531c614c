package main_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/critest"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
)

const (
	unitFile    = "../../deploy/systemd/pullguard.service"
	snippetFile = "../../deploy/kubelet/config-snippet.yaml"
)

// unitServeArgs returns the arguments of serve in the unit's ExecStart,
// after "pullguard", with the continuation lines joined.
func unitServeArgs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	var cmdline string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			in, line = true, rest
		}
		if !in {
			continue
		}
		cont := strings.HasSuffix(strings.TrimSpace(line), `\`)
		cmdline += " " + strings.TrimSuffix(strings.TrimSpace(line), `\`)
		if !cont {
			break
		}
	}
	fields := strings.Fields(cmdline)
	require.GreaterOrEqual(t, len(fields), 2, "ExecStart in %s", unitFile)
	require.Equal(t, "/usr/bin/pullguard", fields[0], "the packages install pullguard there")
	return fields[1:]
}

// TestDeploySnippetAcceptedWithEitherGate: the kubelet snippet reads as the
// kubelet reads it, with the kubelet's gate off and on, and sets what serve
// needs from the kubelet.
func TestDeploySnippetAcceptedWithEitherGate(t *testing.T) {
	for _, gate := range []string{"KubeletEnsureSecretPulledImages=false", "KubeletEnsureSecretPulledImages=true"} {
		t.Run(gate, func(t *testing.T) {
			s, err := nodeconfig.LoadSettings(snippetFile, nodeconfig.Flags{FeatureGates: gate})
			require.NoError(t, err)
			assert.Empty(t, s.Warnings, "every field of the snippet is one the kubelet and pullguard know")
			assert.Equal(t, "unix:///run/pullguard/pullguard.sock", s.ImageServiceEndpoint)
			assert.Equal(t, "unix:///run/containerd/containerd.sock", s.ContainerRuntimeEndpoint)
			assert.Zero(t, s.RegistryPullQPS, "no pull throttle")
			assert.False(t, s.SerializeImagePulls)
			assert.Equal(t, int32(10), s.MaxParallelImagePulls)
		})
	}
}

// TestDeployUnitProtectsWithTheKubeletsGateOff: serve started with exactly
// the unit's flags (temporary paths in place of the node's) and the
// snippet merged into a kubelet configuration whose gate is off protects.
func TestDeployUnitProtectsWithTheKubeletsGateOff(t *testing.T) {
	dir := shortDir(t)
	snippet, err := os.ReadFile(snippetFile)
	require.NoError(t, err)
	cfg := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, append(snippet, []byte("featureGates:\n  KubeletEnsureSecretPulledImages: false\n")...), 0o600))
	runtime := "unix://" + critest.Serve(t, critest.NewImageService())
	socket, root := filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root")
	subst := map[string]string{
		"--listen":                 "unix://" + socket,
		"--image-service-endpoint": runtime,
		"--root-dir":               root,
		"--config":                 cfg,
		"--kubelet-root-dir":       filepath.Join(dir, "kubelet"),
		"--metrics-bind-address":   "127.0.0.1:0",
	}
	args := unitServeArgs(t)
	require.Equal(t, "serve", args[0])
	seen := map[string]bool{}
	for i := 1; i+1 < len(args); i++ {
		if v, ok := subst[args[i]]; ok {
			seen[args[i]] = true
			args[i+1] = v
			i++
		}
	}
	for f := range subst {
		assert.True(t, seen[f], "the unit sets %s", f)
	}
	assert.NotContains(t, args, "--feature-gates", "the unit does not turn the protection off")

	d := startServe(t, socket, root, args[1:]...)
	code, body := d.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok: protecting (policy NeverVerifyPreloadedImages)", body)
	_, body = d.get(t, "/metrics")
	assert.Contains(t, body, "pullguard_serve_protection_enabled 1")
	assert.NotContains(t, d.out.String(), "PASS-THROUGH")
	require.Equal(t, 0, d.stop(t))
	assert.FileExists(t, filepath.Join(root, "credtracker", "records.db"), "the tracker kept a store: it is not the disabled one")
}
