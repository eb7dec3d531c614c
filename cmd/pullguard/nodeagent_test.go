package main_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/nodeagent"
)

// TestNodeAgentReady: the readiness probe prints the agent's reason, the
// kubelet puts it in the pod's Unhealthy event, and exits 1 when the node
// is not ready.
func TestNodeAgentReady(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		status   *nodeagent.Status
		wantCode int
		wantOut  string
	}{
		{name: "no status yet", wantCode: 1, wantOut: "Starting: the agent has written no status yet"},
		{name: "refused", status: &nodeagent.Status{Reason: nodeagent.ReasonRefused, Message: "install refused: /var/lib/kubelet/config.yaml:40: the kubelet's image service is unix:///x"}, wantCode: 1, wantOut: "InstallRefused: install refused: /var/lib/kubelet/config.yaml:40:"},
		{name: "installed", status: &nodeagent.Status{Ready: true, Reason: nodeagent.ReasonInstalled, Message: "installed"}, wantOut: "Installed: installed\n"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, string(rune('a'+i)), "status.json")
			if tt.status != nil {
				require.NoError(t, nodeagent.WriteStatus(file, *tt.status))
			}
			r := pullguard(t, "node-agent", "ready", "--status-file", file)
			assert.Equal(t, tt.wantCode, r.code, r.stderr)
			assert.Contains(t, r.stdout, tt.wantOut)
		})
	}
}

// TestNodeAgentNeedsItsNode: without its node's name (the Lease's holder)
// the agent does not start, and touches nothing.
func TestNodeAgentNeedsItsNode(t *testing.T) {
	root := t.TempDir()
	r := pullguardEnv(t, []string{"NODE_NAME=", "POD_NAMESPACE=x"}, nil, "node-agent", "install", "--host-root", root, "--status-file", filepath.Join(root, "s"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "--node-name (or $NODE_NAME) is required")
	assert.NoFileExists(t, filepath.Join(root, "s"))
}

// TestServeArgsServeRefuses: install and the agent refuse a serve flag
// serve would refuse at start, before anything is written.
func TestServeArgsServeRefuses(t *testing.T) {
	root := t.TempDir()
	for _, args := range [][]string{
		{"install", "--host-root", root, "--serve-arg=--no-such-flag=1"},
		{"node-agent", "install", "--host-root", root, "--node-name", "n", "--pod-namespace", "x", "--serve-arg=--no-such-flag=1"},
	} {
		r := pullguard(t, args...)
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "--serve-arg: serve refuses it: unknown flag: --no-such-flag")
	}
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing written")
}

// TestInstallServeArg: --serve-arg sets a flag on serve's command line in
// its drop-in, over the unit's.
func TestInstallServeArg(t *testing.T) {
	root := kubeadmNode(t, "v1.33.4")
	r := pullguard(t, "install", "--host-root", root, "--dry-run", "--serve-arg=--metrics-bind-address=127.0.0.1:10299")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "--metrics-bind-address 127.0.0.1:10299")
	assert.NotContains(t, r.stdout, "--metrics-bind-address 127.0.0.1:10264")
}
