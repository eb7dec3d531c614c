package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/criproxy"
)

// serveListener is the socket serve answers on. Started by systemd with a
// socket (pullguard.socket: LISTEN_FDS, LISTEN_PID), it is that socket,
// which must be the unix stream socket at socket (--listen): systemd owns
// its file, so closing it leaves the file in place, and connections made
// while serve is not running wait there for the next serve. Started
// without one, serve makes its own (criproxy.Listen) and removes it when
// it closes. inherited says which.
func serveListener(socket string) (lis net.Listener, inherited bool, err error) {
	// Listeners unsets LISTEN_FDS and LISTEN_PID: the credential-provider
	// plugins serve runs do not see them.
	passed, err := activation.Listeners()
	if err != nil {
		return nil, false, fmt.Errorf("the sockets systemd passed (LISTEN_FDS): %w", err)
	}
	if len(passed) == 0 {
		l, err := criproxy.Listen(socket)
		return l, false, err
	}
	closeAll := func() {
		for _, l := range passed {
			if l != nil {
				l.Close()
			}
		}
	}
	if len(passed) != 1 {
		closeAll()
		return nil, false, fmt.Errorf("systemd passed %d sockets (LISTEN_FDS); serve takes one, the ListenStream= of pullguard.socket", len(passed))
	}
	l := passed[0]
	if l == nil {
		return nil, false, fmt.Errorf("the socket systemd passed (LISTEN_FDS=1) is not a listening stream socket: pullguard.socket must have ListenStream=%s", socket)
	}
	addr := l.Addr()
	if addr.Network() != "unix" {
		l.Close()
		return nil, false, fmt.Errorf("the socket systemd passed, %s:%s, is not a listening stream socket: pullguard.socket must have ListenStream=%s", addr.Network(), addr.String(), socket)
	}
	if filepath.Clean(addr.String()) != filepath.Clean(socket) {
		l.Close()
		return nil, false, fmt.Errorf("systemd passed the socket unix:%s, but --listen is unix://%s: make pullguard.socket's ListenStream= and serve's --listen the same path", addr.String(), socket)
	}
	return l, true, nil
}

// sdNotify tells systemd serve's state (sd_notify: READY=1, STOPPING=1,
// STATUS=...) when it started serve with a NOTIFY_SOCKET (Type=notify),
// and does nothing otherwise.
func sdNotify(logger klog.Logger, states ...string) {
	for _, s := range states {
		if _, err := daemon.SdNotify(false, s); err != nil {
			logger.Error(err, "Failed to notify systemd", "state", s)
		}
	}
}

// runtimeRetryInterval is how long serve waits between two checks of a
// runtime that did not answer.
const runtimeRetryInterval = time.Second

// awaitRuntime returns once backend answers ImageFsInfo (the call the
// kubelet's image-service check and /healthz make), asking again every
// runtimeRetryInterval while it does not; false when ctx ended first.
// Serve is not ready before: a kubelet ordered after its READY would find
// an image service that cannot answer.
func awaitRuntime(ctx context.Context, backend criproxy.Backend, endpoint string, timeout time.Duration, logger klog.Logger) bool {
	for failures := 0; ; failures++ {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		_, err := backend.ImageFsInfo(callCtx)
		cancel()
		if err == nil {
			if failures > 0 {
				logger.Info("The runtime answers", "endpoint", endpoint)
			}
			return true
		}
		if failures == 0 {
			logger.Error(err, "The runtime does not answer; serve is not ready until it does, and asks again every second", "endpoint", endpoint)
			sdNotify(logger, "STATUS=Waiting for the runtime at "+endpoint)
		}
		t := time.NewTimer(runtimeRetryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}
