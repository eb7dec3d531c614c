package criproxy

import (
	"context"
	"time"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// DialBackend connects to a runtime's CRI image service, for forwarding:
// pkg/criruntime's NewRemote (cri-client's call semantics; no OpenTelemetry
// stats handler, static HTTP/2 windows, no log of its own: the proxy
// redacts what it logs). timeout bounds the connection and every call but
// PullImage (bounded by the caller's context).
func DialBackend(ctx context.Context, endpoint string, timeout time.Duration) (Backend, error) {
	return criruntime.NewRemote(ctx, endpoint, timeout)
}
