package criruntime

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	criapi "k8s.io/cri-api/pkg/apis"
)

// DefaultRemoteTimeout is the kubelet's default --runtime-request-timeout,
// a sensible connection timeout for NewRemote.
const DefaultRemoteTimeout = 2 * time.Minute

// NewRemote connects to the CRI image service of a real container runtime,
// for example "unix:///run/containerd/containerd.sock" (a bare absolute or
// relative socket path is accepted too). timeout bounds the connection and
// every call but PullImage, which is bounded by its context only, as in the
// kubelet. The connection is checked with an ImageFsInfo call before
// NewRemote returns. Close the service when done.
//
// The service is cri-api's generated client with k8s.io/cri-client's call
// semantics (remoteClient), on a connection with static HTTP/2 windows, and
// it logs nothing: a runtime's error, which may carry what a registry
// echoed, reaches a log only through the caller's redaction.
func NewRemote(ctx context.Context, endpoint string, timeout time.Duration) (criapi.ImageManagerService, error) {
	ep, err := ParseEndpoint(endpoint)
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
		return nil, fmt.Errorf("%w %q: %s is not a unix socket", ErrInvalidEndpoint, endpoint, socket)
	}
	svc, err := newRemoteClient(ctx, socket, timeout)
	if err != nil {
		return nil, fmt.Errorf("failed to connect to image service at %q: %w", endpoint, err)
	}
	return svc, nil
}

// ParseEndpoint validates a CRI endpoint and returns it as
// "unix:///absolute/path". It accepts "unix:///path" and a bare socket path
// (made absolute); other schemes, such as tcp://, are refused: the kubelet
// reaches runtimes over unix sockets on Linux.
func ParseEndpoint(endpoint string) (string, error) {
	endpoint = strings.TrimSpace(endpoint)
	switch {
	case endpoint == "":
		return "", fmt.Errorf("%w: empty endpoint", ErrInvalidEndpoint)
	case !strings.Contains(endpoint, "://"):
		abs, err := filepath.Abs(endpoint)
		if err != nil {
			return "", fmt.Errorf("%w %q: %v", ErrInvalidEndpoint, endpoint, err)
		}
		return "unix://" + abs, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidEndpoint, endpoint, err)
	}
	if u.Scheme != "unix" {
		return "", fmt.Errorf("%w %q: scheme %q is not supported, use unix:///path/to/socket", ErrInvalidEndpoint, endpoint, u.Scheme)
	}
	if u.Host != "" || u.Opaque != "" || !filepath.IsAbs(u.Path) {
		return "", fmt.Errorf("%w %q: the socket path must be absolute, as in unix:///run/containerd/containerd.sock", ErrInvalidEndpoint, endpoint)
	}
	return "unix://" + filepath.Clean(u.Path), nil
}
