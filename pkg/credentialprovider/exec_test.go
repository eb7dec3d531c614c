package credentialprovider_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// processGone reports whether pid has exited (no such process, or a zombie
// waiting for a reaper).
func processGone(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// The state follows the parenthesized command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// eventBound bounds the wait for an event a test waits for (a plugin
// writing its pid, a process dying); it is not a margin the event must
// beat: an event that takes longer is a failure on any machine.
const eventBound = 30 * time.Second

// waitForFile waits until path exists.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	require.Eventually(t, func() bool { _, err := os.Stat(path); return err == nil }, eventBound, 10*time.Millisecond,
		"%s was not written", path)
}

// waitForResult receives a look-up's error.
func waitForResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(eventBound):
		require.FailNow(t, "the look-up did not return")
		return nil
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err, "the hanging plugin wrote its grandchild's pid")
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	return pid
}

func TestPluginFailures(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		opts      []cp.Option
		wantErrIs error
		wantKind  cp.ErrorKind
		wantErr   string
	}{
		{
			// On the real clock: the plugin never answers, so the timeout
			// is the only way out however slow the machine is.
			name:      "slow plugin past the global timeout",
			args:      []string{"-mode", "slow", "-delay", "1m"},
			opts:      []cp.Option{cp.WithTimeout(200 * time.Millisecond)},
			wantErrIs: cp.ErrPluginTimeout, wantKind: cp.KindTimeout,
			wantErr: "did not finish within 200ms",
		},
		{
			name:      "garbage output",
			args:      []string{"-mode", "garbage"},
			wantErrIs: cp.ErrInvalidResponse, wantKind: cp.KindInvalidResponse,
			wantErr: "malformed JSON at offset 17",
		},
		{
			name:      "huge stdout",
			args:      []string{"-mode", "huge"},
			opts:      []cp.Option{cp.WithOutputLimits(64<<10, 64<<10)},
			wantErrIs: cp.ErrOutputTooLarge, wantKind: cp.KindOutputTooLarge,
			wantErr: "wrote more than 65536 bytes to stdout",
		},
		{
			name:      "huge stderr",
			args:      []string{"-mode", "hugeerr"},
			opts:      []cp.Option{cp.WithOutputLimits(64<<10, 1<<10)},
			wantErrIs: cp.ErrOutputTooLarge, wantKind: cp.KindOutputTooLarge,
			wantErr: "wrote more than 1024 bytes to stderr",
		},
		{
			name:      "crash",
			args:      []string{"-mode", "crash"},
			wantErrIs: cp.ErrPluginExit, wantKind: cp.KindExit,
			wantErr: "exited with status 3",
		},
		{
			name:      "wrong apiVersion",
			args:      []string{"-api-version", "credentialprovider.kubelet.k8s.io/v1beta1"},
			wantErrIs: cp.ErrInvalidResponse, wantKind: cp.KindInvalidResponse,
			wantErr: "apiVersion differs from the request's",
		},
		{
			name:      "wrong kind",
			args:      []string{"-kind", "CredentialProviderRequest"},
			wantErrIs: cp.ErrInvalidResponse, wantKind: cp.KindInvalidResponse,
			wantErr: "kind is not CredentialProviderResponse",
		},
		{
			name:      "bad cacheKeyType",
			args:      []string{"-key-type", "Forever"},
			wantErrIs: cp.ErrInvalidResponse, wantKind: cp.KindInvalidResponse,
			wantErr: "cacheKeyType is not Image, Registry or Global",
		},
		// Refused by the kubelet's strict decoding, as here.
		{
			name:      "unknown field",
			args:      []string{"-extra", `"future":"pass:x"`},
			wantErrIs: cp.ErrInvalidResponse, wantKind: cp.KindInvalidResponse,
			wantErr: "response has an unknown, duplicated or miscased field: an unknown field",
		},
		{
			name:      "duplicated field",
			args:      []string{"-extra", `"cacheKeyType":"Global"`},
			wantErrIs: cp.ErrInvalidResponse, wantKind: cp.KindInvalidResponse,
			wantErr: "duplicated cacheKeyType",
		},
		{
			name:      "miscased field",
			args:      []string{"-extra", `"CacheDuration":"1h"`},
			wantErrIs: cp.ErrInvalidResponse, wantKind: cp.KindInvalidResponse,
			wantErr: "cacheDuration miscased",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			pidfile := filepath.Join(t.TempDir(), "grandchild.pid")
			args := append([]string{"-pidfile", pidfile}, tt.args...)
			m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute, args...)}, tt.opts...)
			got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
			assert.Empty(t, got)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.wantErrIs)
			var pe *cp.PluginError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tt.wantKind, pe.Kind)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.Contains(t, err.Error(), `plugin "p" for image "registry.example/app"`)
			assert.NotContains(t, err.Error(), "pass:", "the error quotes the plugin's output")
		})
	}
}

// TestHangingPluginIsKilledAtItsTimeout: a plugin that never answers is
// killed, with the process it started, when its timeout passes. The
// timeout is measured on a fake clock stepped once the plugin has started
// its grandchild, so a loaded machine cannot make the timeout fire first.
func TestHangingPluginIsKilledAtItsTimeout(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	pidfile, pluginPidfile := filepath.Join(dir, "grandchild.pid"), filepath.Join(dir, "plugin.pid")
	timeouts := clocktesting.NewFakeClock(e.clock.Now())
	m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute,
		"-mode", "hang", "-pidfile", pidfile, "-plugin-pidfile", pluginPidfile)},
		cp.WithProviderTimeout("p", 300*time.Millisecond), cp.WithTimeoutClock(timeouts))
	done := make(chan error, 1)
	go func() {
		_, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
		done <- err
	}()
	waitForFile(t, pidfile)
	grandchild, plugin := readPid(t, pidfile), readPid(t, pluginPidfile)
	require.True(t, timeouts.HasWaiters(), "the run's timeout is set")
	timeouts.Step(299 * time.Millisecond)
	assert.True(t, timeouts.HasWaiters(), "the timeout does not fire before 300ms")

	timeouts.Step(time.Millisecond)
	err := waitForResult(t, done)

	assert.ErrorIs(t, err, cp.ErrPluginTimeout)
	var pe *cp.PluginError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, cp.KindTimeout, pe.Kind)
	assert.Contains(t, err.Error(), `plugin "p" for image "registry.example/app"`)
	assert.Contains(t, err.Error(), "did not finish within 300ms and was killed")
	// The run returns once the reaper has killed and reaped everything
	// below it.
	assert.True(t, processGone(plugin), "the plugin %d outlived its timeout", plugin)
	assert.True(t, processGone(grandchild), "the plugin's grandchild %d outlived the timeout", grandchild)
}

func TestCancelKillsPluginAndGrandchild(t *testing.T) {
	e := newEnv(t)
	pidfile := filepath.Join(t.TempDir(), "grandchild.pid")
	m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute, "-mode", "hang", "-pidfile", pidfile)})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := m.ForPod(cp.PodInfo{}).Lookup(ctx, "registry.example/app")
		done <- err
	}()
	waitForFile(t, pidfile)
	pid := readPid(t, pidfile)
	cancel()
	err := waitForResult(t, done)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Eventually(t, func() bool { return processGone(pid) }, eventBound, 10*time.Millisecond,
		"the plugin's grandchild %d outlived the cancellation", pid)
}

func TestCloseKillsRunningPlugin(t *testing.T) {
	e := newEnv(t)
	pidfile := filepath.Join(t.TempDir(), "grandchild.pid")
	m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute, "-mode", "hang", "-pidfile", pidfile)})
	done := make(chan error, 1)
	go func() {
		_, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
		done <- err
	}()
	waitForFile(t, pidfile)
	pid := readPid(t, pidfile)
	m.Close()
	err := waitForResult(t, done)
	assert.ErrorIs(t, err, cp.ErrPluginCanceled)
	assert.Eventually(t, func() bool { return processGone(pid) }, eventBound, 10*time.Millisecond)
}
