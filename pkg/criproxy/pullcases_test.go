package criproxy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/pulltest"
	"github.com/pullguard/pullguard/pkg/criproxy"
)

// TestPullCases runs the pull cases the image manager passes too
// (internal/pulltest) against PullImage, as the kubelet calls it for a
// pod with the table's credential: an Always pull, or for the cases that
// say so the IfNotPresent path (the pod's presence check, then its pull).
func TestPullCases(t *testing.T) {
	pulltest.Run(t, func(t *testing.T, env pulltest.Env) pulltest.Pull {
		srv, err := criproxy.New(env.Runtime, env.Tracker, env.Tracker.Hasher(), criproxy.WithManifestVerification(env.Verifier), criproxy.WithLogger(testLogger()))
		require.NoError(t, err)
		spec := &runtimeapi.ImageSpec{Image: pulltest.Image}
		if env.IfNotPresent {
			// The kubelet's IfNotPresent path: the pod's presence check
			// (its annotations on the spec), then its pull.
			spec.Annotations = map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2026-11-21T12:00:00Z"}
		}
		return func(ctx context.Context) pulltest.Outcome {
			if env.IfNotPresent {
				st, err := srv.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
				require.NoError(t, err)
				require.Nil(t, st.GetImage(), "the present image is hidden from the pod")
			}
			resp, err := srv.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, Auth: pulltest.Auth(), SandboxConfig: pod("team-a", "app")})
			if err == nil {
				assert.Equal(t, pulltest.ID, resp.GetImageRef(), "the runtime's image ref, as the kubelet expects it")
			}
			return pulltest.Outcome{Class: pullClass[status.Code(err)], Message: status.Convert(err).Message()}
		}
	})
}

// pullClass is the outcome each gRPC code of PullImage tells.
var pullClass = map[codes.Code]pulltest.Class{
	codes.OK:               pulltest.Pulled,
	codes.Unknown:          pulltest.Failed,
	codes.NotFound:         pulltest.Failed,
	codes.PermissionDenied: pulltest.Unverified,
	codes.Canceled:         pulltest.Canceled,
	codes.DeadlineExceeded: pulltest.DeadlineExceeded,
}

// TestRemoveCases runs the removal cases the image manager passes too
// (internal/pulltest) against RemoveImage, as the kubelet's image GC calls
// it, and the full prune.
func TestRemoveCases(t *testing.T) {
	pulltest.RunRemove(t, func(t *testing.T, env pulltest.Env) pulltest.Remover {
		srv, err := criproxy.New(env.Runtime, env.Tracker, env.Tracker.Hasher(), criproxy.WithLogger(testLogger()))
		require.NoError(t, err)
		return pulltest.Remover{
			Remove: func(ctx context.Context, image string) error {
				_, err := srv.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})
				return err
			},
			Prune: srv.Prune,
		}
	})
}
