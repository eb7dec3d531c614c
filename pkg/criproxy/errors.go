package criproxy

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// backendError turns an error of the backend into the gRPC status the
// kubelet sees: a backend's own status keeps its code and message (the
// registry's "401 Unauthorized" reaches the pod's events as it would
// without the proxy); a backend that cannot be reached is Unavailable;
// an ended context keeps its code.
func backendError(rpc string, err error) error {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); ok {
		return s.Err()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Unknown, fmt.Sprintf("image service %s: %v", rpc, err))
}

// invalid is an InvalidArgument status naming what was wrong.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}
