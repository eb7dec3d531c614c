package criproxy

import (
	"runtime"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// MaxRecvMsgSize bounds a request the proxy accepts (the CRI's requests
// are small; a list of a big node's images is a response).
const MaxRecvMsgSize = 16 << 20

// recvWindow is the proxy's static HTTP/2 receive window, per stream and
// per connection.
const recvWindow = 1 << 20

// NewGRPCServer returns the gRPC server `pullguard serve` runs, with srv
// registered as its runtime.v1.ImageService: ServerOptions' transport,
// and the interceptors that count requests and turn a panic into
// Internal; opts are added after them (a CallWatch's interceptor, say).
// The benchmarks build their proxy with it too, so that they measure the
// server the daemon runs.
func NewGRPCServer(srv runtimeapi.ImageServiceServer, logger klog.Logger, opts ...grpc.ServerOption) *grpc.Server {
	gs := grpc.NewServer(append(append(ServerOptions(),
		grpc.ChainUnaryInterceptor(UnaryInterceptor(logger)),
		grpc.ChainStreamInterceptor(StreamInterceptor(logger)),
	), opts...)...)
	runtimeapi.RegisterImageServiceServer(gs, srv)
	return gs
}

// ServerOptions are the transport settings of NewGRPCServer's server, for
// an embedder that serves the proxy on a server of its own (and for the
// benchmarks' baseline, a bare forwarding server with the same
// transport).
//
// Requests run on a few long-lived stream workers instead of a new
// goroutine each: a new goroutine's stack grows (is copied) on every
// request through the handler, the gRPC client call to the runtime and
// protobuf, which was the largest single cost on the proxy's side of a
// forwarded ImageStatus. When every worker is busy (pulls in flight, 64
// pods at once), gRPC falls back to a new goroutine: nothing waits.
//
// Static receive windows turn off gRPC's bandwidth-delay estimation,
// which sends a PING (and reads its ack) after nearly every request when
// requests are small, as the CRI's are: two more frames per call on a
// unix socket whose window never needs to grow. Requests are far below
// these windows; what the proxy sends (a big ListImages) is governed by
// the kubelet's windows.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.NumStreamWorkers(streamWorkers()),
		grpc.StaticStreamWindowSize(recvWindow),
		grpc.StaticConnWindowSize(recvWindow),
	}
}

// streamWorkers is how many stream workers the server keeps: enough for
// the kubelet's usual concurrency on a small node, a few idle goroutines
// on a big one.
func streamWorkers() uint32 {
	return uint32(max(8, 2*runtime.GOMAXPROCS(0)))
}
