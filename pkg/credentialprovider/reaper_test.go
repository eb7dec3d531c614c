package credentialprovider_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// TestPluginsLeaveNothingBehind: whatever way a run ends, no process the
// plugin started is alive once the run returns, including one started in
// a new session (setsid) and one double-forked into a new session, which a
// process-group kill does not reach.
func TestPluginsLeaveNothingBehind(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		opts    []cp.Option
		timeout bool  // the run's timeout fires once the process is left
		wantErr error // nil: the run succeeds
	}{
		{name: "success", args: []string{"-mode", "good"}},
		{name: "failure", args: []string{"-mode", "crash"}, wantErr: cp.ErrPluginExit},
		{name: "timeout", args: []string{"-mode", "slow", "-delay", "1h"}, timeout: true, wantErr: cp.ErrPluginTimeout},
		{name: "output too large", args: []string{"-mode", "huge"}, opts: []cp.Option{cp.WithOutputLimits(64<<10, 64<<10)}, wantErr: cp.ErrOutputTooLarge},
	}
	for _, leave := range []string{"setsid", "daemon"} {
		for _, tt := range tests {
			t.Run(leave+"/"+tt.name, func(t *testing.T) {
				e := newEnv(t)
				pidfile := filepath.Join(t.TempDir(), "left.pid")
				args := append([]string{"-leave", leave, "-leave-pidfile", pidfile}, tt.args...)
				// Timeouts are measured on a fake clock, stepped only once
				// the plugin has left its process behind.
				timeouts := clocktesting.NewFakeClock(e.clock.Now())
				opts := append([]cp.Option{cp.WithProviderTimeout("p", 500*time.Millisecond), cp.WithTimeoutClock(timeouts)}, tt.opts...)
				m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute, args...)}, opts...)

				done := make(chan error, 1)
				go func() {
					_, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
					done <- err
				}()
				if tt.timeout {
					waitForFile(t, pidfile)
					timeouts.Step(500 * time.Millisecond)
				}
				err := waitForResult(t, done)

				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
				} else {
					require.NoError(t, err)
				}
				pid := readPid(t, pidfile)
				assert.True(t, processGone(pid), "process %d, left behind in a new session, outlived the run", pid)
			})
		}
	}
}

// TestProcessGroupKillMissesSetsid shows what the reaper is for: killing
// the plugin's process group leaves a setsid grandchild running.
func TestProcessGroupKillMissesSetsid(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "left.pid")
	cmd := exec.Command(pluginBinary(t), "-leave", "setsid", "-leave-pidfile", pidfile, "-mode", "good")
	cmd.Stdin = bytes.NewReader([]byte(`{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"registry.example/app"}`))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Run())
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	pid := readPid(t, pidfile)
	t.Cleanup(func() {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
	})
	assert.False(t, processGone(pid), "without the reaper, the setsid grandchild survives the group kill")
}

// BenchmarkPluginRun measures one plugin run (a cache miss), the reaper
// included.
func BenchmarkPluginRun(b *testing.B) {
	e := newEnv(b)
	m := e.manager(b, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute)})
	i := 0
	for b.Loop() {
		i++
		if _, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app-"+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
}
