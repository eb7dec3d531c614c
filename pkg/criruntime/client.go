package criruntime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// remoteWindow is the client's static HTTP/2 receive window,
// per stream and per connection.
const remoteWindow = 1 << 20

// maxRemoteRecvMsgSize is the largest response the client
// accepts: k8s.io/cri-client's (and the kubelet's) 16 MiB.
const maxRemoteRecvMsgSize = 16 << 20

// remoteClient is a runtime's image service (NewRemote): cri-api's
// generated client with the call semantics of k8s.io/cri-client's, which
// TestRemoteMatchesCRIClient checks call by call:
//   - every call but PullImage is bounded by the timeout; PullImage only by
//     its context, as in the kubelet;
//   - ImageStatus of an image with no ID or no size is an error;
//   - a pull's Unknown status loses its code (the kubelet's image manager
//     matches the bare message), and a pull with no image reference is an
//     error;
//   - ListImages is the unary call (cri-client's default).
//
// It differs from cri-client in two ways, neither in what a call returns:
//   - It logs nothing. cri-client logs every failed call's error at error
//     level through the caller's logger, and a runtime's error can carry
//     what a registry echoed (a hostile one can echo the request's
//     Authorization header): pullguard's callers return the error and log
//     it redacted (TestRemoteLogsNothing).
//   - Its connection has static HTTP/2 windows instead of gRPC's dynamic
//     ones. With dynamic windows, gRPC's bandwidth estimation sends the
//     runtime a PING after nearly every response it reads (the CRI's
//     responses never fill a window, so the estimate never settles), and
//     reads the runtime's acknowledgement: two more frames, and wake-ups of
//     both processes, on every call. cri-client takes no dial options.
type remoteClient struct {
	timeout time.Duration
	conn    *grpc.ClientConn
	client  runtimeapi.ImageServiceClient
}

var _ criapi.ImageManagerService = (*remoteClient)(nil)

// newRemoteClient connects to the image service at socket (an absolute
// path) and checks the connection with ImageFsInfo within timeout, as
// cri-client does.
func newRemoteClient(ctx context.Context, socket string, timeout time.Duration) (*remoteClient, error) {
	params := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
	params.Backoff.BaseDelay = 100 * time.Millisecond
	params.Backoff.MaxDelay = 3 * time.Second
	conn, err := grpc.NewClient("passthrough:///"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRemoteRecvMsgSize)),
		grpc.WithStaticStreamWindowSize(remoteWindow),
		grpc.WithStaticConnWindowSize(remoteWindow),
		grpc.WithConnectParams(params),
	)
	if err != nil {
		return nil, err
	}
	c := &remoteClient{timeout: timeout, conn: conn, client: runtimeapi.NewImageServiceClient(conn)}
	vctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.client.ImageFsInfo(vctx, &runtimeapi.ImageFsInfoRequest{}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("validate CRI v1 image API for endpoint %q: %w", "unix://"+socket, err)
	}
	return c, nil
}

func (c *remoteClient) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.client.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: filter})
	if err != nil {
		return nil, err
	}
	return resp.GetImages(), nil
}

func (c *remoteClient) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.client.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: image, Verbose: verbose})
	if err != nil {
		return nil, err
	}
	if img := resp.GetImage(); img != nil && (img.GetId() == "" || img.GetSize() == 0) {
		return nil, fmt.Errorf("Id or size of image %q is not set", image.GetImage()) //nolint:staticcheck // cri-client's message, word for word
	}
	return resp, nil
}

func (c *remoteClient) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	resp, err := c.client.PullImage(ctx, &runtimeapi.PullImageRequest{Image: image, Auth: auth, SandboxConfig: sandbox})
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unknown {
			return "", errors.New(st.Message())
		}
		return "", err
	}
	if resp.GetImageRef() == "" {
		return "", fmt.Errorf("imageRef of image %q is not set", image.GetImage())
	}
	return resp.GetImageRef(), nil
}

func (c *remoteClient) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	_, err := c.client.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: image})
	return err
}

func (c *remoteClient) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.client.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
}

func (c *remoteClient) Close(context.Context) error { return c.conn.Close() }
