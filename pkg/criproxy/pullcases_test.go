package criproxy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/pulltest"
	"github.com/pullguard/pullguard/pkg/criproxy"
)

// TestPullCases runs the pull cases the image manager passes too
// (internal/pulltest) against PullImage, as the kubelet calls it for a
// pod with the table's credential.
func TestPullCases(t *testing.T) {
	pulltest.Run(t, func(t *testing.T, env pulltest.Env) pulltest.Pull {
		srv, err := criproxy.New(env.Runtime, env.Tracker, env.Tracker.Hasher(), criproxy.WithManifestVerification(env.Verifier), criproxy.WithLogger(testLogger()))
		require.NoError(t, err)
		return func(ctx context.Context) pulltest.Outcome {
			_, err := srv.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: pulltest.Image}, Auth: pulltest.Auth(), SandboxConfig: pod("team-a", "app")})
			return pulltest.Outcome{Class: pullClass[status.Code(err)], Message: status.Convert(err).Message()}
		}
	})
}

// pullClass is the outcome each gRPC code of PullImage tells.
var pullClass = map[codes.Code]pulltest.Class{
	codes.OK:               pulltest.Pulled,
	codes.Unknown:          pulltest.Failed,
	codes.PermissionDenied: pulltest.Unverified,
	codes.Canceled:         pulltest.Canceled,
	codes.DeadlineExceeded: pulltest.DeadlineExceeded,
}
