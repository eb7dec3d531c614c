package criproxy_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/guardedpull"
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
			tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: t.TempDir()}, guardedpull.Inventory(backend))
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

// containerdLike resolves ImageStatus as containerd's CRI plugin does: an
// image ID with or without "sha256:", a unique prefix of one, or any
// spelling of a name the image has (tag or repo digest) once normalized.
type containerdLike struct{ *fakeBackend }

func (c containerdLike) ImageStatus(ctx context.Context, spec *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := spec.GetImage()
	var found *runtimeapi.Image
	for idv, img := range c.images {
		hex := strings.TrimPrefix(idv, "sha256:")
		if q == idv || (len(strings.TrimPrefix(q, "sha256:")) >= 2 && strings.HasPrefix(hex, strings.TrimPrefix(q, "sha256:"))) {
			found = img
		}
		if n, err := normalize(q); err == nil {
			for _, name := range append(append([]string{}, img.RepoTags...), img.RepoDigests...) {
				if m, err := normalize(name); err == nil && m == n {
					found = img
				}
			}
		}
	}
	if found == nil {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: found, Info: map[string]string{"info": "verbose"}}, nil
}

// TestOtherSpellingsOfAPrivateImage: tenant A pulled docker.io/team-a/app
// with its credential. Every other way to name that image (Docker Hub's
// short and long forms, index.docker.io, its repo digest, tag and digest,
// its image ID with and without "sha256:", a short ID, verbose or not)
// is reported absent by ImageStatus, and a pull of it by tenant B (with
// its own credential or none) is not answered from A's record.
func TestOtherSpellingsOfAPrivateImage(t *testing.T) {
	const digest = "sha256:" + "d1" + "00000000000000000000000000000000000000000000000000000000000000"
	imgID := id(43)
	hex := strings.TrimPrefix(imgID, "sha256:")
	h := newHarness(t, harnessConfig{setup: func(f *fakeBackend) {}})
	// Swap in containerd's resolution: the proxy asks the wrapped backend.
	cl := containerdLike{h.fake}
	srv, err := criproxy.New(cl, h.tracker, h.tracker.(interface{ Hasher() *credential.Hasher }).Hasher(), criproxy.WithPruneInterval(0), criproxy.WithClock(h.clock))
	require.NoError(t, err)
	h.fake.publish(t, "team-a/app:v1", imgID, "alice:pw")
	_, err = srv.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "team-a/app:v1"}, Auth: creds("alice", "pw"), SandboxConfig: pod("a", "p")})
	require.NoError(t, err)
	h.fake.mu.Lock()
	h.fake.images[imgID].RepoDigests = []string{"docker.io/team-a/app@" + digest}
	h.fake.mu.Unlock()

	for _, spelling := range []string{
		"team-a/app:v1", "docker.io/team-a/app:v1", "index.docker.io/team-a/app:v1",
		"docker.io/team-a/app@" + digest, "team-a/app:v1@" + digest, "index.docker.io/team-a/app@" + digest,
		imgID, hex, hex[:12], "sha256:" + hex[:12],
	} {
		for _, verbose := range []bool{false, true} {
			direct, err := cl.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: spelling}, verbose)
			require.NoError(t, err)
			require.NotNil(t, direct.GetImage(), "%s: the runtime resolves it", spelling)
			resp, err := srv.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: spelling}, Verbose: verbose})
			require.NoError(t, err, spelling)
			assert.Nil(t, resp.GetImage(), "%s (verbose %v): reported present to a pod that shows nothing", spelling, verbose)
			assert.Empty(t, resp.GetInfo(), spelling)
		}
		for _, who := range []*runtimeapi.AuthConfig{creds("bob", "pw"), nil, {}, {ServerAddress: "docker.io"}} {
			_, err := srv.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: spelling}, Auth: who, SandboxConfig: pod("b", "p")})
			assert.Error(t, err, "%s: tenant B (%v) got A's image", spelling, who != nil)
		}
	}
}

// rawCodec sends and receives bytes as they are, to put on the wire what
// no protobuf library would encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestInvalidUTF8OnTheWire: an image name that is not UTF-8 (which a
// proto3 string may not hold) is refused by the server's decoder before
// any handler runs: an error, no panic, nothing forwarded, and the proxy
// keeps serving.
func TestInvalidUTF8OnTheWire(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	conn, err := grpc.NewClient("unix://"+h.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	name := []byte("reg/\xff\xfe\x00:v1")
	spec := append([]byte{0x0a, byte(len(name))}, name...) // ImageSpec.image
	for _, method := range []string{"ImageStatus", "PullImage", "RemoveImage"} {
		req := append([]byte{0x0a, byte(len(spec))}, spec...) // field 1: the ImageSpec
		var resp []byte
		err := conn.Invoke(context.Background(), "/runtime.v1.ImageService/"+method, &req, &resp, grpc.ForceCodec(rawCodec{}))
		require.Error(t, err, method)
		assert.Contains(t, []codes.Code{codes.InvalidArgument, codes.Internal}, status.Code(err), "%s: %v", method, err)
	}
	_, _, pulls := h.fake.counts()
	assert.Zero(t, pulls, "nothing reached the runtime")
	assert.Zero(t, h.fake.statusCalls(), "nothing reached the runtime")
	assert.False(t, h.present(t, reg+"/absent:v1"), "still serving")
}

// TestAllowlistNotReachedByAnImageID: under NeverVerifyAllowlistedImages
// a preloaded image is free only under allowlisted names. containerd's
// ImageStatus also finds an image by its ID, with or without "sha256:",
// and by any unique prefix of it ("3f", "3f2a9c"): names that parse as
// Docker Hub official images ("docker.io/library/3f"), which an allowlist
// of official images ("docker.io/library/*") matches. A pod naming a
// preloaded, not allowlisted image by such an ID must not get it free;
// the allowlisted image stays free under its own name, and under
// NeverVerifyPreloadedImages every preloaded image stays free.
func TestAllowlistNotReachedByAnImageID(t *testing.T) {
	private := reg + "/private/tool:v1"
	privateID := "sha256:3f2a9c" + strings.Repeat("1", 58)
	busyboxID := "sha256:b0" + strings.Repeat("2", 62)
	for _, tc := range []struct {
		policy   credtracker.Policy
		wantFree bool // the private preloaded image, asked by its ID
	}{
		{credtracker.NeverVerifyAllowlistedImages, false},
		{credtracker.NeverVerifyPreloadedImages, true},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			h := newHarness(t, harnessConfig{policy: tc.policy, allowlist: []string{"docker.io/library/*"}})
			cl := containerdLike{h.fake}
			srv, err := criproxy.New(cl, h.tracker, h.tracker.(interface{ Hasher() *credential.Hasher }).Hasher(), criproxy.WithPruneInterval(0), criproxy.WithClock(h.clock))
			require.NoError(t, err)
			h.fake.preload(t, privateID, private)
			h.fake.preload(t, busyboxID, "docker.io/library/busybox:1")
			present := func(image string) bool {
				resp, err := srv.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
				require.NoError(t, err, image)
				return resp.GetImage() != nil
			}
			hex := strings.TrimPrefix(privateID, "sha256:")
			assert.Equal(t, tc.policy == credtracker.NeverVerifyPreloadedImages, present(private), "the private image by its name")
			assert.True(t, present("busybox:1"), "the allowlisted image by its name")
			for _, byID := range []string{privateID, hex[:2], hex[:6], "sha256:" + hex[:6]} {
				direct, err := cl.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: byID}, false)
				require.NoError(t, err)
				require.Equal(t, privateID, direct.GetImage().GetId(), "%s: the runtime resolves it", byID)
				assert.Equal(t, tc.wantFree, present(byID), "the private preloaded image asked by %q", byID)
			}
		})
	}
}
