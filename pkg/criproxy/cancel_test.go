package criproxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/fakeruntime"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// TestKubeletGivesUpDuringVerification: the kubelet cancels a pull (the
// pod went away) while serve's own check of it waits on the registry,
// before the runtime's pull (a present image) or after it (a first
// pull). The pull ends with Canceled and is counted as failed, as the
// kubelet's cancellation of the runtime's own pull is: not as a
// registry that did not serve the manifest the runtime resolved
// (PermissionDenied, "unverified", which an operator reads as a lying
// registry), nor as serve's own time limit.
func TestKubeletGivesUpDuringVerification(t *testing.T) {
	const (
		image = "registry.example/team-b/app:v1"
		id    = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	)
	repoDigest := "registry.example/team-b/app@sha256:" + strings.Repeat("b", 64)
	for _, tc := range []struct {
		name    string
		present bool // the image is under the name before the pull
	}{
		{name: "the check after a first pull", present: false},
		{name: "the present image's check", present: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := &runtimeapi.Image{Id: id, Size: 512, RepoDigests: []string{repoDigest}}
			if tc.present {
				img.RepoTags = []string{image}
			}
			b := &fakeruntime.ClaimTrusting{}
			b.Add(img)
			tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: t.TempDir()}, guardedpull.Inventory(b))
			require.NoError(t, err)
			t.Cleanup(func() { _ = tr.Close() })
			entered := make(chan struct{})
			srv, err := criproxy.New(namingBackend{b, id}, tr, tr.Hasher(), criproxy.WithLogger(testLogger()),
				criproxy.WithManifestVerification(guardedpull.VerifierFunc(func(ctx context.Context, _ string, _ *runtimeapi.AuthConfig, _ []string) (string, error) {
					close(entered)
					<-ctx.Done()
					return "", fmt.Errorf("GET https://registry.example/v2/team-b/app/manifests/v1: %w", ctx.Err())
				})))
			require.NoError(t, err)

			// An Always pull as the kubelet v1.36 sends it: the pod's
			// annotations, its credential, its sandbox.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { <-entered; cancel() }()
			unverified, failed, timeouts := decisions(t, "PullImage", "unverified"), decisions(t, "PullImage", "failed"), decisions(t, "PullImage", "timeout")
			_, err = srv.PullImage(ctx, &runtimeapi.PullImageRequest{
				Image: &runtimeapi.ImageSpec{Image: image, Annotations: map[string]string{
					"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2027-01-15T08:00:00.000000001Z",
				}},
				Auth:          creds("bob", "bob-pw-e03a55"),
				SandboxConfig: pod("team-b", "p"),
			})

			require.Error(t, err)
			assert.Equal(t, codes.Canceled, status.Code(err), err)
			assert.NotContains(t, status.Convert(err).Message(), "did not serve the manifest", "no registry was found lying")
			assert.Zero(t, decisions(t, "PullImage", "unverified")-unverified, "counted as unverified")
			assert.Zero(t, decisions(t, "PullImage", "timeout")-timeouts, "counted as serve's own time limit")
			assert.Equal(t, 1.0, decisions(t, "PullImage", "failed")-failed, "counted as failed")
			assert.NotContains(t, status.Convert(err).Message(), "bob-pw-e03a55")
		})
	}
}
