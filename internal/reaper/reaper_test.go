//go:build linux

package reaper_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/reaper"
)

func run(t *testing.T, script string) (int, string) {
	t.Helper()
	cmd, env := reaper.Command("/bin/sh", []string{"-c", script}, os.Environ())
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stderr.String()
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestNothingOutlivesTheProgram: a program that leaves a process in a new
// session behind (and exits with a status) returns that status, and the
// process is gone when the reaper has exited.
func TestNothingOutlivesTheProgram(t *testing.T) {
	tests := []struct {
		name     string
		exit     string
		wantCode int
	}{
		{name: "success", exit: "exit 0", wantCode: 0},
		{name: "failure", exit: "exit 3", wantCode: 3},
		{name: "killed by a signal", exit: "kill -9 $$", wantCode: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "pid")
			code, _ := run(t, `setsid sh -c 'echo $$ > `+pidfile+`.tmp; mv `+pidfile+`.tmp `+pidfile+`; exec sleep 600' </dev/null >/dev/null 2>&1 &
while [ ! -s `+pidfile+` ]; do :; done
`+tt.exit)
			assert.Equal(t, tt.wantCode, code)
			b, err := os.ReadFile(pidfile)
			require.NoError(t, err)
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			require.NoError(t, err)
			assert.False(t, alive(pid), "the setsid process %d outlived the program", pid)
		})
	}
}

func TestStartFailureIsReported(t *testing.T) {
	cmd, env := reaper.Command(filepath.Join(t.TempDir(), "absent"), nil, os.Environ())
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, reaper.ExitStart, ee.ExitCode())
	assert.True(t, strings.HasPrefix(stderr.String(), reaper.StartFailure), stderr.String())
	assert.NotContains(t, stderr.String(), "absent", "the cause only, not the path")
}
