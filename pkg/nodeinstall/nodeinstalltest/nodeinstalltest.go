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
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// Systemd records the calls ("daemon-reload", "enable [a b]", "start a",
// "restart a", "stop a", "disable [a b]"), and fails the one named in
// Fail. It is safe for concurrent use.
//
// It keeps when each unit last became active (ActiveSince): a start or
// restart makes it active at Now (time.Now when nil), a stop inactive;
// Active sets it beforehand.
type Systemd struct {
	mu     sync.Mutex
	calls  []string
	Fail   string
	Now    func() time.Time
	active map[string]time.Time
}

// Active makes unit active since t (the zero time: not active).
func (f *Systemd) Active(unit string, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active == nil {
		f.active = map[string]time.Time{}
	}
	f.active[unit] = t
}

// ActiveSince is not among Calls (it changes nothing); it fails when Fail
// is "active-since UNIT".
func (f *Systemd) ActiveSince(_ context.Context, u string) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fail == "active-since "+u {
		return time.Time{}, errors.New("no such property")
	}
	return f.active[u], nil
}

// started records that u became active now, or stopped.
func (f *Systemd) started(u string, active bool) {
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	t := time.Time{}
	if active {
		t = now()
	}
	f.Active(u, t)
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
func (f *Systemd) Start(_ context.Context, u string) error   { return f.job("start", u, true) }
func (f *Systemd) Restart(_ context.Context, u string) error { return f.job("restart", u, true) }
func (f *Systemd) Stop(_ context.Context, u string) error    { return f.job("stop", u, false) }

// job records the call; a start of an active unit does nothing, as
// systemd's.
func (f *Systemd) job(verb, u string, active bool) error {
	if err := f.do(verb + " " + u); err != nil {
		return err
	}
	f.mu.Lock()
	running := !f.active[u].IsZero()
	f.mu.Unlock()
	if verb == "start" && running {
		return nil
	}
	f.started(u, active)
	return nil
}

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
