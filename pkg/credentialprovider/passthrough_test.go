package credentialprovider_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

const passthroughRequest = `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"registry.example/team/app"}`

// direct runs the plugin as the kubelet does (no reaper, no wrapper): the
// reference a pass-through must reproduce.
func direct(t *testing.T, args []string, env []string) (stdout, stderr []byte, code int) {
	t.Helper()
	cmd := exec.Command(pluginBinary(t), args...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader([]byte(passthroughRequest))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.Bytes(), errOut.Bytes(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.Bytes(), errOut.Bytes(), 0
}

// TestPassthrough: the caller gets what the plugin gave, byte for byte:
// stdout (all of it, even past the limit of what is kept), the exit
// status, the signal that killed it, and its stderr up to the limit.
func TestPassthrough(t *testing.T) {
	env := append(os.Environ(), "TESTPLUGIN_PREFIX=env-")
	tests := []struct {
		name         string
		args         []string
		stdoutLimit  int
		stderrLimit  int
		wantComplete bool
		wantCut      bool
		wantSignal   syscall.Signal
	}{
		{name: "an answer", args: []string{"-mode", "good", "-key-type", "Registry", "-duration", "1h"}, wantComplete: true},
		{name: "the environment reaches the plugin", args: []string{"-mode", "env-names", "-env-names", "TESTPLUGIN_PREFIX,HOME"}, wantComplete: true},
		{name: "garbage", args: []string{"-mode", "garbage"}, wantComplete: true},
		{name: "non-zero exit", args: []string{"-mode", "crash"}, wantComplete: true},
		{name: "killed by a signal", args: []string{"-mode", "sigkill"}, wantComplete: true, wantSignal: syscall.SIGKILL},
		{name: "stdout past the limit still all passed", args: []string{"-mode", "huge"}, stdoutLimit: 64 << 10},
		{name: "stderr cut at the limit", args: []string{"-mode", "hugeerr"}, stderrLimit: 64 << 10, wantComplete: true, wantCut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantOut, wantErr, wantCode := direct(t, tt.args, env)
			var got bytes.Buffer
			out, err := cp.Passthrough(bg, cp.Invocation{
				Path: pluginBinary(t), Args: tt.args, Env: env, Stdin: []byte(passthroughRequest), Stdout: &got,
				StdoutLimit: tt.stdoutLimit, StderrLimit: tt.stderrLimit,
			})
			require.NoError(t, err)
			assert.True(t, bytes.Equal(wantOut, got.Bytes()), "stdout, byte for byte: %d bytes, want %d", got.Len(), len(wantOut))
			assert.Equal(t, tt.wantComplete, out.StdoutComplete)
			if tt.wantComplete {
				assert.Equal(t, string(wantOut), string(out.Stdout))
			} else {
				assert.True(t, bytes.Equal(wantOut[:tt.stdoutLimit], out.Stdout), "what is kept: %d bytes", len(out.Stdout))
			}
			if tt.wantSignal != 0 {
				assert.Equal(t, tt.wantSignal, out.Signal)
				assert.Equal(t, -1, out.ExitCode)
				assert.Equal(t, -1, wantCode)
			} else {
				assert.Equal(t, wantCode, out.ExitCode)
				assert.Zero(t, out.Signal)
			}
			assert.Equal(t, tt.wantCut, out.StderrCut)
			if tt.wantCut {
				assert.True(t, bytes.Equal(wantErr[:tt.stderrLimit], out.Stderr), "what is kept: %d bytes", len(out.Stderr))
			} else {
				assert.Equal(t, string(wantErr), string(out.Stderr))
			}
			assert.Equal(t, tt.wantComplete && wantCode == 0 && tt.wantSignal == 0, out.Succeeded())
		})
	}
}

// TestPassthroughEndsTheProcessTree: a plugin that does not finish within
// the timeout, or could not start, is an error; the process it left in a
// new session is gone when Passthrough returns.
func TestPassthroughEndsTheProcessTree(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		pidfile := filepath.Join(t.TempDir(), "left.pid")
		clock := clocktesting.NewFakeClock(time.Now())
		done := make(chan error, 1)
		go func() {
			_, err := cp.Passthrough(bg, cp.Invocation{
				Path: pluginBinary(t), Args: []string{"-leave", "setsid", "-leave-pidfile", pidfile, "-mode", "slow", "-delay", "1h"},
				Env: os.Environ(), Stdin: []byte(passthroughRequest), Timeout: time.Minute, Clock: clock,
			})
			done <- err
		}()
		waitForFile(t, pidfile)
		require.Eventually(t, clock.HasWaiters, eventBound, time.Millisecond)
		clock.Step(time.Minute)
		err := waitForResult(t, done)
		require.ErrorIs(t, err, cp.ErrPluginTimeout)
		assert.Contains(t, err.Error(), "did not finish within 1m0s")
		assert.True(t, processGone(readPid(t, pidfile)), "the process left in a new session outlived the run")
	})
	t.Run("cannot start", func(t *testing.T) {
		_, err := cp.Passthrough(bg, cp.Invocation{Path: filepath.Join(t.TempDir(), "missing"), Stdin: []byte(passthroughRequest)})
		require.ErrorIs(t, err, cp.ErrPluginStart)
	})
}

// TestDecodeRequest: the pass-through reads the request's version, image
// and whether it carries a token, and never quotes the request in an
// error.
func TestDecodeRequest(t *testing.T) {
	const token = "sa-token-value-5e1f"
	tests := []struct {
		name    string
		data    string
		want    cp.Request
		wantErr bool
	}{
		{name: "v1", data: passthroughRequest, want: cp.Request{APIVersion: "credentialprovider.kubelet.k8s.io/v1", Image: "registry.example/team/app"}},
		{name: "with a token", data: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"a.example/b","serviceAccountToken":"` + token + `"}`,
			want: cp.Request{APIVersion: "credentialprovider.kubelet.k8s.io/v1", Image: "a.example/b", ServiceAccountToken: token}},
		{name: "v1alpha1", data: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1alpha1","kind":"CredentialProviderRequest","image":"a.example/b"}`,
			want: cp.Request{APIVersion: "credentialprovider.kubelet.k8s.io/v1alpha1", Image: "a.example/b"}},
		{name: "unknown version", data: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v9","kind":"CredentialProviderRequest","image":"a.example/b","serviceAccountToken":"` + token + `"}`, wantErr: true},
		{name: "wrong kind", data: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","image":"a.example/b"}`, wantErr: true},
		{name: "no image", data: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest"}`, wantErr: true},
		{name: "not JSON", data: `{"serviceAccountToken":"` + token, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cp.DecodeRequest([]byte(tt.data))
			if tt.wantErr {
				require.Error(t, err)
				assert.NotContains(t, err.Error(), token)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
