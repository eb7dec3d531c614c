package criproxy_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/criproxy"
)

// echoingBackend fails every pull with pullErr, built from the pull's
// credential: containerd puts up to 64 KiB of a registry's error body in
// its error, so a registry (or a proxy in front of it) that echoes what
// it was sent reaches the proxy's caller through the runtime's error.
type echoingBackend struct {
	*fakeBackend
	pullErr func(auth *runtimeapi.AuthConfig) error
}

func (b *echoingBackend) PullImage(_ context.Context, _ *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	return "", b.pullErr(auth)
}

// TestFailedPullNeverCarriesTheCredential: a runtime's error that echoes
// the pull's credential (in any encoding: the password, the docker config
// "auth", the Authorization header) reaches neither the kubelet (the
// error becomes the pod's event) nor the proxy's log; the error keeps its
// gRPC code and the registry's status text.
func TestFailedPullNeverCarriesTheCredential(t *testing.T) {
	const user, password = "alice", "s3cret-pw-7f19a2"
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	token := "idtok-5be1c0d93a"
	echo := func(auth *runtimeapi.AuthConfig) string {
		return fmt.Sprintf(`unexpected status from GET request to https://%s/v2/team-a/app/manifests/v1: 401 Unauthorized: {"errors":[{"code":"UNAUTHORIZED","detail":"Authorization: Basic %s; password=%s; auth=%s; token=%s; registry_token=%s"}]}`,
			reg, base64.StdEncoding.EncodeToString([]byte(auth.GetUsername()+":"+auth.GetPassword())), auth.GetPassword(), auth.GetAuth(), auth.GetIdentityToken(), auth.GetRegistryToken())
	}
	for _, tc := range []struct {
		name string
		auth *runtimeapi.AuthConfig
		err  func(auth *runtimeapi.AuthConfig) error
		code codes.Code
	}{
		{"username and password, gRPC status", &runtimeapi.AuthConfig{Username: user, Password: password}, func(a *runtimeapi.AuthConfig) error {
			return status.Error(codes.Unknown, "failed to pull and unpack image: "+echo(a))
		}, codes.Unknown},
		{"auth only, gRPC status", &runtimeapi.AuthConfig{Auth: basic}, func(a *runtimeapi.AuthConfig) error {
			return status.Error(codes.NotFound, "failed to resolve reference: "+echo(&runtimeapi.AuthConfig{Username: user, Password: password, Auth: a.GetAuth()}))
		}, codes.NotFound},
		{"identity token, plain error", &runtimeapi.AuthConfig{IdentityToken: token, RegistryToken: token + "-r"}, func(a *runtimeapi.AuthConfig) error {
			return errors.New("pull failed: " + echo(a))
		}, codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := &echoingBackend{fakeBackend: newFakeBackend(), pullErr: tc.err}
			tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: t.TempDir()}, criproxy.Inventory(backend))
			require.NoError(t, err)
			t.Cleanup(func() { tr.Close() })
			var logs syncBuffer
			logger := funcr.New(func(prefix, args string) { fmt.Fprintln(&logs, prefix, args) }, funcr.Options{Verbosity: 10})
			srv, err := criproxy.New(backend, tr, tr.Hasher(), criproxy.WithLogger(logger))
			require.NoError(t, err)

			_, err = srv.PullImage(context.Background(), &runtimeapi.PullImageRequest{
				Image: &runtimeapi.ImageSpec{Image: reg + "/team-a/app:v1"}, Auth: tc.auth, SandboxConfig: pod("team-a", "p"),
			})
			require.Error(t, err)
			assert.Equal(t, tc.code, status.Code(err), "the runtime's code is kept")
			assert.Contains(t, status.Convert(err).Message(), "401 Unauthorized", "the registry's answer is kept")
			secrets := []string{password, basic, token, token + "-r"}
			assert.Empty(t, leak.Scan(map[string]string{"error": err.Error(), "log": logs.String()}, secrets...), "a credential got out")
		})
	}
}

// TestImageUserLookupOpensNoAnswerWindow follows a real kubelet: after
// every pull, container creation asks ImageStatus of the container's image
// again (getImageUser), with nothing that tells it from a presence check.
// That "absent" answer must not open the answer window: an Always
// container restarted (crash-loop back-off, 10 s and up) with a recorded
// credential still goes to the registry, so a moved tag is followed and a
// revoked credential is refused, as the kubelet does for Always. A
// presence check long after the pull (the IfNotPresent path) still opens
// it.
func TestImageUserLookupOpensNoAnswerWindow(t *testing.T) {
	image := reg + "/team-a/app:v1"
	for _, tc := range []struct {
		name         string
		first        string // "always" or "ifnotpresent": how the container first got the image
		wantManifest int    // registry requests of the restart's Always pull
	}{
		{name: "Always container restarted", first: "always", wantManifest: 1},
		{name: "IfNotPresent container answered, then an Always pod", first: "ifnotpresent", wantManifest: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.fake.publish(t, image, id(42), "alice:pw")
			_, err := h.pull(t, "a", image, "alice", "pw") // recorded
			require.NoError(t, err)
			h.clock.Step(criproxy.DefaultAnswerWindow + time.Second)

			switch tc.first {
			case "always":
				_, err = h.pullAlways(t, "a", image, "alice", "pw")
			case "ifnotpresent":
				_, err = h.pull(t, "a", image, "alice", "pw")
			}
			require.NoError(t, err)
			require.False(t, h.present(t, image), "getImageUser: hidden") // container creation
			h.clock.Step(10 * time.Second)                                // back-off before the restart

			m0, _, _ := h.fake.counts()
			_, err = h.pullAlways(t, "a", image, "alice", "pw")
			require.NoError(t, err)
			m1, _, _ := h.fake.counts()
			assert.Equal(t, tc.wantManifest, m1-m0, "registry requests of the restarted Always container's pull")
		})
	}
}
