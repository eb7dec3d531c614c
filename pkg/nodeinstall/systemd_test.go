package nodeinstall_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
	"github.com/pullguard/pullguard/pkg/nodeinstall/nodeinstalltest"
)

// fakeSystemd is nodeinstalltest's fake of the host's systemd.
type fakeSystemd = nodeinstalltest.Systemd

// readyAfter is ready from its n-th call on.
func readyAfter(n int, calls *int) func(context.Context) error {
	return func(context.Context) error {
		*calls++
		if *calls < n {
			return errors.New("doctor: serve-answers: serve does not answer")
		}
		return nil
	}
}

func TestRestarter(t *testing.T) {
	units := []string{"pullguard.service", "pullguard.socket"}
	tests := []struct {
		name      string
		fail      string
		readyAt   int
		cancel    bool
		wantCalls []string
		wantErr   string
		wantPolls int
	}{
		{
			name:      "socket, service, then the kubelet; ready at the third check",
			readyAt:   3,
			wantCalls: []string{"daemon-reload", "enable [pullguard.service pullguard.socket]", "start pullguard.socket", "restart pullguard.service", "restart kubelet.service"},
			wantPolls: 3,
		},
		{
			name:      "serve does not start: the kubelet is not restarted",
			fail:      "restart pullguard.service",
			wantCalls: []string{"daemon-reload", "enable [pullguard.service pullguard.socket]", "start pullguard.socket", "restart pullguard.service"},
			wantErr:   "restarting pullguard.service: job failed (the kubelet was not restarted)",
		},
		{
			name:      "never ready: the deadline ends the wait with doctor's problem",
			readyAt:   1 << 30,
			cancel:    true,
			wantCalls: []string{"daemon-reload", "enable [pullguard.service pullguard.socket]", "start pullguard.socket", "restart pullguard.service", "restart kubelet.service"},
			wantErr:   "the node is not ready: doctor: serve-answers: serve does not answer",
			wantPolls: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd := &fakeSystemd{Fail: tt.fail}
			clock := testingclock.NewFakeClock(time.Unix(0, 0))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			polls := 0
			ready := readyAfter(tt.readyAt, &polls)
			r := &nodeinstall.Restarter{Systemd: sd, Clock: clock, Interval: time.Second, Ready: func(ctx context.Context) error {
				err := ready(ctx)
				if tt.cancel && polls == 5 {
					cancel()
				}
				return err
			}}
			done := make(chan error, 1)
			go func() { done <- r.Activate(ctx, units) }()
			var err error
		wait:
			for {
				select {
				case err = <-done:
					break wait
				default:
					if clock.HasWaiters() {
						clock.Step(time.Second)
					}
					runtime.Gosched()
				}
			}
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.wantCalls, sd.Calls())
			assert.Equal(t, tt.wantPolls, polls)
		})
	}
}

func TestRestarterDeactivate(t *testing.T) {
	units := []string{"pullguard.service", "pullguard.socket"}
	tests := []struct {
		name      string
		withdraw  bool
		wantCalls []string
	}{
		{name: "Deactivate: the kubelet restarted on its own settings", wantCalls: []string{"disable [pullguard.service pullguard.socket]", "daemon-reload", "restart kubelet.service", "stop pullguard.service", "stop pullguard.socket"}},
		{name: "Withdraw: a kubelet never restarted onto serve is not restarted", withdraw: true, wantCalls: []string{"disable [pullguard.service pullguard.socket]", "daemon-reload", "stop pullguard.service", "stop pullguard.socket"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd := &fakeSystemd{}
			var order []string
			r := &nodeinstall.Restarter{Systemd: sd}
			files := func() error {
				order = append(order, fmt.Sprintf("files given back after %d calls", len(sd.Calls())))
				return nil
			}
			var err error
			if tt.withdraw {
				err = r.Withdraw(context.Background(), units, files)
			} else {
				err = r.Deactivate(context.Background(), units, files)
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantCalls, sd.Calls())
			assert.Equal(t, []string{"files given back after 1 calls"}, order, "the units are disabled before their files go, and systemd reloads after")
		})
	}
}

// TestDialSystemdUnderHostRoot: with no bus under the host root, the dial
// fails and names the socket it tried.
func TestDialSystemdUnderHostRoot(t *testing.T) {
	root := t.TempDir()
	_, _, err := nodeinstall.DialSystemd(context.Background(), root)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connecting to systemd at "+root+"/run/systemd/private")
}
