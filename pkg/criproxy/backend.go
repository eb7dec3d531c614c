package criproxy

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	criclient "k8s.io/cri-client/pkg"

	pgruntime "github.com/pullguard/pullguard/pkg/runtime"
)

// DialBackend connects to a runtime's CRI image service through
// k8s.io/cri-client, for forwarding. It is pkg/runtime's NewRemote (the
// same endpoint checks), without cri-client's default OpenTelemetry stats
// handler: on a hop that only forwards, its per-call cost (message events,
// metadata propagation) is the largest part of what the proxy adds, and
// serve produces no traces. timeout bounds the connection and every call
// but PullImage (bounded by the caller's context).
func DialBackend(ctx context.Context, endpoint string, timeout time.Duration) (Backend, error) {
	ep, err := pgruntime.ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("image service timeout must be positive, got %v", timeout)
	}
	socket := strings.TrimPrefix(ep, "unix://")
	info, err := os.Stat(socket)
	if err != nil {
		return nil, fmt.Errorf("image service endpoint %q: %w (is the container runtime running?)", endpoint, err)
	}
	if info.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("image service endpoint %q: %s is not a unix socket", endpoint, socket)
	}
	svc, err := criclient.NewRemoteImageServiceBuilder().
		WithEndpoint(ep).
		WithConnectionTimeout(timeout).
		WithTracerProvider(nil).
		Build(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to connect to image service at %q: %w", endpoint, err)
	}
	return svc, nil
}
