package criproxy

import (
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// MaxRecvMsgSize bounds a request the proxy accepts (the CRI's requests
// are small; a list of a big node's images is a response).
const MaxRecvMsgSize = 16 << 20

// NewGRPCServer returns the gRPC server `pullguard serve` runs, with srv
// registered as its runtime.v1.ImageService: the interceptors that count
// requests and turn a panic into Internal. The benchmarks build their
// proxy with it too, so that they measure the server the daemon runs.
func NewGRPCServer(srv runtimeapi.ImageServiceServer, logger klog.Logger) *grpc.Server {
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(UnaryInterceptor(logger)),
		grpc.ChainStreamInterceptor(StreamInterceptor(logger)),
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
	)
	runtimeapi.RegisterImageServiceServer(gs, srv)
	return gs
}
