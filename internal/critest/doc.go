// Package critest serves CRI image services to tests over a unix socket,
// as a container runtime serves its own, so that a test reaches them with
// a real CRI client (pkg/criruntime's, the kubelet's): Serve, and
// ImageService, a small runtime's image store on the gRPC side.
//
// Only tests import it (pkg/criruntime's, cmd/pullguard's); it depends on
// cri-api, grpc and testify, and on no pullguard package, so that the
// runtime package's tests may use it.
package critest
