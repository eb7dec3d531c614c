package nodeinstall

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"k8s.io/utils/clock"
)

// Systemd is the host's service manager, as install and uninstall drive
// it. Each call returns once systemd's job ended, with an error unless it
// ended "done".
type Systemd interface {
	// Reload is `systemctl daemon-reload`.
	Reload(ctx context.Context) error
	// Enable and Disable are `systemctl enable` and `disable` of units
	// by name.
	Enable(ctx context.Context, units ...string) error
	Disable(ctx context.Context, units ...string) error
	Start(ctx context.Context, unit string) error
	Restart(ctx context.Context, unit string) error
	Stop(ctx context.Context, unit string) error
	// ActiveSince is when unit last became active (its
	// ActiveEnterTimestamp), the zero time when it is not active now.
	ActiveSince(ctx context.Context, unit string) (time.Time, error)
}

// KubeletUnit is the kubelet's unit.
const KubeletUnit = "kubelet.service"

// DefaultPollInterval is how often Activate and Deactivate ask whether the
// node is ready.
const DefaultPollInterval = 2 * time.Second

// Restarter restarts the kubelet onto serve (Activate) or off it
// (Deactivate) and waits for the node to be ready.
type Restarter struct {
	Systemd Systemd
	// Ready says whether the node works (doctor's checks pass); nil is
	// always ready.
	Ready func(ctx context.Context) error
	// Clock paces the polls of Ready, every Interval (DefaultPollInterval
	// when 0).
	Clock    clock.Clock
	Interval time.Duration
}

// ErrKubeletNotRestarted is in Activate's error when it failed before it
// restarted the kubelet: the kubelet still runs on its old settings.
var ErrKubeletNotRestarted = errors.New("the kubelet was not restarted")

// Activate reloads systemd, enables serve's units, starts its socket and
// service, restarts the kubelet, then waits until Ready passes or ctx
// ends. A failure before the kubelet's restart wraps
// ErrKubeletNotRestarted: the kubelet is left as it ran.
func (r *Restarter) Activate(ctx context.Context, units []string) error {
	sd := r.Systemd
	if err := sd.Reload(ctx); err != nil {
		return fmt.Errorf("systemd daemon-reload: %w (%w)", err, ErrKubeletNotRestarted)
	}
	if err := sd.Enable(ctx, units...); err != nil {
		return fmt.Errorf("enabling %v: %w (%w)", units, err, ErrKubeletNotRestarted)
	}
	// The socket first, so that nothing that comes early is refused; it
	// is started (a running socket keeps the calls it holds). The service
	// is restarted: a serve already running, of a package or an earlier
	// install, must read the files just written (its binary, its flags),
	// and a start does nothing to a running unit.
	ordered := slices.Clone(units)
	slices.SortStableFunc(ordered, func(a, b string) int { return unitOrder(a) - unitOrder(b) })
	for _, u := range ordered {
		verb, do := "starting", sd.Start
		if unitOrder(u) != 0 {
			verb, do = "restarting", sd.Restart
		}
		if err := do(ctx, u); err != nil {
			return fmt.Errorf("%s %s: %w (%w)", verb, u, err, ErrKubeletNotRestarted)
		}
	}
	if err := sd.Restart(ctx, KubeletUnit); err != nil {
		return fmt.Errorf("restarting %s: %w", KubeletUnit, err)
	}
	return r.wait(ctx)
}

// RestartServe reloads systemd, enables serve's units and restarts
// serve's service alone (its binary, units or flags changed; the kubelet's
// files did not), then waits until Ready passes. The kubelet keeps
// running: serve's socket holds its calls meanwhile.
func (r *Restarter) RestartServe(ctx context.Context, units []string) error {
	sd := r.Systemd
	if err := sd.Reload(ctx); err != nil {
		return fmt.Errorf("systemd daemon-reload: %w", err)
	}
	if err := sd.Enable(ctx, units...); err != nil {
		return fmt.Errorf("enabling %v: %w", units, err)
	}
	if err := sd.Restart(ctx, ServeUnit); err != nil {
		return fmt.Errorf("restarting %s: %w", ServeUnit, err)
	}
	return r.wait(ctx)
}

// Deactivate disables serve's units, reloads systemd (uninstall has given
// back the kubelet's files), restarts the kubelet, stops serve, and waits
// until Ready passes.
func (r *Restarter) Deactivate(ctx context.Context, units []string, files func() error) error {
	return r.deactivate(ctx, units, files, true)
}

// Withdraw is Deactivate for a kubelet that never restarted onto serve
// (Activate failed with ErrKubeletNotRestarted): it runs on its own
// settings, which files gives back, and is not restarted.
func (r *Restarter) Withdraw(ctx context.Context, units []string, files func() error) error {
	return r.deactivate(ctx, units, files, false)
}

func (r *Restarter) deactivate(ctx context.Context, units []string, files func() error, restartKubelet bool) error {
	sd := r.Systemd
	if err := sd.Disable(ctx, units...); err != nil {
		return fmt.Errorf("disabling %v: %w", units, err)
	}
	if err := files(); err != nil {
		return err
	}
	if err := sd.Reload(ctx); err != nil {
		return fmt.Errorf("systemd daemon-reload: %w", err)
	}
	if restartKubelet {
		if err := sd.Restart(ctx, KubeletUnit); err != nil {
			return fmt.Errorf("restarting %s: %w", KubeletUnit, err)
		}
	}
	ordered := slices.Clone(units)
	slices.SortStableFunc(ordered, func(a, b string) int { return unitOrder(b) - unitOrder(a) })
	for _, u := range ordered {
		if err := sd.Stop(ctx, u); err != nil {
			return fmt.Errorf("stopping %s: %w", u, err)
		}
	}
	return r.wait(ctx)
}

func unitOrder(name string) int {
	if len(name) > 7 && name[len(name)-7:] == ".socket" {
		return 0
	}
	return 1
}

// Wait polls Ready every Interval until it passes or ctx ends (doctor's
// --wait).
func (r *Restarter) Wait(ctx context.Context) error { return r.wait(ctx) }

func (r *Restarter) wait(ctx context.Context) error {
	if r.Ready == nil {
		return nil
	}
	c, every := r.Clock, r.Interval
	if c == nil {
		c = clock.RealClock{}
	}
	if every <= 0 {
		every = DefaultPollInterval
	}
	for {
		err := r.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the node is not ready: %w", err)
		case <-c.After(every):
		}
	}
}

// DialSystemd connects to the host's systemd over the system bus at
// root/run/dbus/system_bus_socket, else systemd's own socket
// root/run/systemd/private.
func DialSystemd(ctx context.Context, root string) (Systemd, func(), error) {
	bus := hostPath(root, "/run/dbus/system_bus_socket")
	hello := true
	if _, err := os.Stat(bus); err != nil {
		bus, hello = hostPath(root, "/run/systemd/private"), false
	}
	conn, err := sdbus.NewConnection(func() (*dbus.Conn, error) {
		c, err := dbus.Dial("unix:path="+bus, dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		if hello {
			if err := c.Hello(); err != nil {
				c.Close()
				return nil, err
			}
		}
		return c, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to systemd at %s: %w", bus, err)
	}
	return dbusSystemd{conn}, conn.Close, nil
}

type dbusSystemd struct{ c *sdbus.Conn }

var _ Systemd = dbusSystemd{}

func (d dbusSystemd) Reload(ctx context.Context) error { return d.c.ReloadContext(ctx) }

func (d dbusSystemd) Enable(ctx context.Context, units ...string) error {
	_, _, err := d.c.EnableUnitFilesContext(ctx, units, false, true)
	return err
}

func (d dbusSystemd) Disable(ctx context.Context, units ...string) error {
	_, err := d.c.DisableUnitFilesContext(ctx, units, false)
	return err
}

func (d dbusSystemd) Start(ctx context.Context, unit string) error {
	return job(ctx, func(ch chan<- string) (int, error) { return d.c.StartUnitContext(ctx, unit, "replace", ch) })
}

func (d dbusSystemd) Restart(ctx context.Context, unit string) error {
	return job(ctx, func(ch chan<- string) (int, error) { return d.c.RestartUnitContext(ctx, unit, "replace", ch) })
}

func (d dbusSystemd) Stop(ctx context.Context, unit string) error {
	return job(ctx, func(ch chan<- string) (int, error) { return d.c.StopUnitContext(ctx, unit, "replace", ch) })
}

func (d dbusSystemd) ActiveSince(ctx context.Context, unit string) (time.Time, error) {
	props, err := d.c.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return time.Time{}, err
	}
	if state, _ := props["ActiveState"].(string); state != "active" {
		return time.Time{}, nil
	}
	usec, ok := props["ActiveEnterTimestamp"].(uint64)
	if !ok {
		return time.Time{}, fmt.Errorf("%s: ActiveEnterTimestamp is %T, not a time", unit, props["ActiveEnterTimestamp"])
	}
	return time.UnixMicro(int64(usec)), nil
}

// job runs a systemd job and waits for its result.
func job(ctx context.Context, start func(chan<- string) (int, error)) error {
	ch := make(chan string, 1)
	if _, err := start(ch); err != nil {
		return err
	}
	select {
	case res := <-ch:
		if res != "done" {
			return errors.New("systemd job " + res)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
