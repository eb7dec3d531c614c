package criproxy

import (
	"context"
	"time"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// DialBackend connects to a runtime's CRI image service through
// k8s.io/cri-client, for forwarding: pkg/criruntime's NewRemoteUntraced (the
// endpoint checks of NewRemote, without cri-client's default OpenTelemetry
// stats handler, whose per-call cost is the largest part of what the proxy
// adds; serve produces no traces). timeout bounds the connection and every
// call but PullImage (bounded by the caller's context).
func DialBackend(ctx context.Context, endpoint string, timeout time.Duration) (Backend, error) {
	return criruntime.NewRemoteUntraced(ctx, endpoint, timeout)
}
