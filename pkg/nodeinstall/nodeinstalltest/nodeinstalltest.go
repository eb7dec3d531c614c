// Package nodeinstalltest is for tests only: a fake of the host's systemd
// (Systemd) and the node layouts of pkg/nodeinstall's testdata (Layout),
// for the tests of nodeinstall and of what drives it.
package nodeinstalltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// Systemd records the calls ("daemon-reload", "enable [a b]", "start a",
// "restart a", "stop a", "disable [a b]"), and fails the one named in
// Fail. It is safe for concurrent use.
type Systemd struct {
	mu    sync.Mutex
	calls []string
	Fail  string
}

var _ nodeinstall.Systemd = (*Systemd)(nil)

// Calls returns the calls so far, in order.
func (f *Systemd) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Reset forgets the calls so far.
func (f *Systemd) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

func (f *Systemd) do(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if call == f.Fail {
		return errors.New("job failed")
	}
	return nil
}

func (f *Systemd) Reload(context.Context) error { return f.do("daemon-reload") }
func (f *Systemd) Enable(_ context.Context, units ...string) error {
	return f.do(fmt.Sprint("enable ", units))
}
func (f *Systemd) Disable(_ context.Context, units ...string) error {
	return f.do(fmt.Sprint("disable ", units))
}
func (f *Systemd) Start(_ context.Context, u string) error   { return f.do("start " + u) }
func (f *Systemd) Restart(_ context.Context, u string) error { return f.do("restart " + u) }
func (f *Systemd) Stop(_ context.Context, u string) error    { return f.do("stop " + u) }

// Layout copies the node layout name of pkg/nodeinstall's testdata
// ("kubeadm", "eks") into a scratch host root and returns it.
func Layout(t testing.TB, name string) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	root := t.TempDir()
	require.NoError(t, os.CopyFS(root, os.DirFS(filepath.Join(filepath.Dir(file), "..", "testdata", name))))
	return root
}
