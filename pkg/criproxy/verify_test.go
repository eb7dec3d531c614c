package criproxy_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/fakeruntime"
	"github.com/pullguard/pullguard/internal/hostile"
	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/registry"
)

// verifyEnv is tenant A's registry and image, already on the node, and a
// proxy in front of a backend that trusts claimed digests.
type verifyEnv struct {
	reg     *registry.Registry
	pushed  registry.Pushed
	media   string
	backend *fakeruntime.ClaimTrusting // trusts the registry's HEAD, as containerd 1.6
	dir     string
	tracker credtracker.Enabled
	srv     *criproxy.Server
	verify  bool
	// timeout is serve's registry timeout (--registry-request-timeout);
	// 0: the defaults.
	timeout time.Duration
}

var verifyPasswords = map[string]string{"alice": "alice-pw-91c2e7", "carol": "carol-pw-4d7f10", "bob": "bob-pw-e03a55"}

func newVerifyEnv(t testing.TB, verify bool) *verifyEnv {
	return newVerifyEnvTimeout(t, verify, 0)
}

// newVerifyEnvTimeout is newVerifyEnv with serve's registry timeout set
// to timeout, as --registry-request-timeout sets it: the time limit of a
// pull's verifications and of each registry request.
func newVerifyEnvTimeout(t testing.TB, verify bool, timeout time.Duration) *verifyEnv {
	t.Helper()
	v := fakeruntime.NewVictim(t, registry.Config{
		Users: []registry.User{{Name: "alice", Password: verifyPasswords["alice"]}, {Name: "carol", Password: verifyPasswords["carol"]},
			{Name: "bob", Password: verifyPasswords["bob"]}},
		Repositories: []registry.Repository{{Name: "team-a/app", Readers: []string{"alice", "carol"}}, {Name: "public/tool", Public: true}},
	})
	e := &verifyEnv{reg: v.Registry, pushed: v.Pushed, media: v.MediaType, dir: t.TempDir(), verify: verify, timeout: timeout, backend: v.Runtime}
	pushed := v.Pushed
	e.start(t)
	// Tenant A pulls its image: the name needs A's credential from now on.
	ref, err := e.pullAlways("team-a", pushed.Reference, basic("alice"))
	require.NoError(t, err)
	require.Equal(t, pushed.ConfigDigest, ref)
	require.False(t, e.present(t, pushed.Reference), "tenant A's image needs its credential") // the puller's GetImageSize
	require.False(t, e.present(t, pushed.Reference), "container creation's getImageUser")
	return e
}

// start opens the tracker and the proxy (again, for a restart).
func (e *verifyEnv) start(t testing.TB) {
	t.Helper()
	tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: e.dir}, guardedpull.Inventory(e.backend))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	opts := []criproxy.Option{criproxy.WithLogger(testLogger())}
	var verifierOpts []criruntime.Option
	if e.timeout > 0 {
		opts = append(opts, criproxy.WithVerificationTimeout(e.timeout))
		verifierOpts = append(verifierOpts, criruntime.WithRegistryTimeout(e.timeout))
	}
	if e.verify {
		opts = append(opts, criproxy.WithManifestVerification(guardedpull.RegistryVerifier(verifierOpts...)))
	}
	e.tracker = tr
	e.srv, err = criproxy.New(e.backend, tr, tr.Hasher(), opts...)
	require.NoError(t, err)
}

func (e *verifyEnv) restart(t *testing.T) {
	t.Helper()
	require.NoError(t, e.tracker.Close())
	e.start(t)
}

// pull is the kubelet's IfNotPresent path for a pod of ns: ImageStatus,
// and PullImage with auth if the image is reported absent.
func (e *verifyEnv) pull(t *testing.T, ns, image string, auth *runtimeapi.AuthConfig) (string, error) {
	t.Helper()
	if e.present(t, image) {
		return "present", nil
	}
	return e.pullAlways(ns, image, auth)
}

// pullAlways is the kubelet's Always path: PullImage with no ImageStatus.
func (e *verifyEnv) pullAlways(ns, image string, auth *runtimeapi.AuthConfig) (string, error) {
	resp, err := e.srv.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}, Auth: auth, SandboxConfig: pod(ns, "p")})
	return resp.GetImageRef(), err
}

func (e *verifyEnv) present(t testing.TB, image string) bool {
	t.Helper()
	resp, err := e.srv.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
	require.NoError(t, err)
	return resp.GetImage() != nil
}

func basic(user string) *runtimeapi.AuthConfig {
	return &runtimeapi.AuthConfig{Username: user, Password: verifyPasswords[user]}
}

// manifestGETs counts the GETs of manifests in a lying registry's log.
func manifestGETs(reqs []hostile.Request) int {
	n := 0
	for _, r := range reqs {
		if r.Method == http.MethodGet && strings.Contains(r.Path, "/manifests/") {
			n++
		}
	}
	return n
}

// TestPullOfAClaimedDigestIsRefused: a tenant's registry claims, in a
// HEAD, the digest of tenant A's private manifest for evil/app:v1. The
// backend names tenant A's content evil/app:v1, as containerd does; the
// proxy GETs the manifest with the pod's credential, sees the registry did
// not serve those bytes, and refuses: PermissionDenied with no credential
// in it, nothing recorded, and ImageStatus reports the name absent to
// every pod, also after a restart. Without the check the attack works,
// which shows that the test can see it.
func TestPullOfAClaimedDigestIsRefused(t *testing.T) {
	bobAuth := base64.StdEncoding.EncodeToString([]byte("bob:" + verifyPasswords["bob"]))
	for _, mode := range []hostile.Mode{hostile.NoBytes, hostile.OtherBytes, hostile.OtherBytesSchema1} {
		for _, tt := range []struct {
			name string
			auth *runtimeapi.AuthConfig
		}{
			{name: "anonymous"},
			{name: "username and password", auth: basic("bob")},
			{name: "docker config auth", auth: &runtimeapi.AuthConfig{Auth: bobAuth}},
			{name: "identity token", auth: &runtimeapi.AuthConfig{IdentityToken: "bob-identity-token-77f1"}},
			{name: "registry token", auth: &runtimeapi.AuthConfig{RegistryToken: "bob-registry-token-a9c4"}},
		} {
			for _, verify := range []bool{true, false} {
				t.Run(fmt.Sprintf("mode %d, %s, verify %t", mode, tt.name, verify), func(t *testing.T) {
					e := newVerifyEnv(t, verify)

					liar, err := hostile.Start(e.pushed.Digest, e.media, mode)
					require.NoError(t, err)
					t.Cleanup(liar.Close)
					evil := liar.Host + "/evil/app:v1"

					_, err = e.pull(t, "team-b", evil, tt.auth)
					t.Logf("the liar's log:\n%s", liar.Log())
					if !verify {
						require.NoError(t, err, "without the check the claimed digest names tenant A's image")
						if tt.auth == nil {
							assert.True(t, e.present(t, evil), "and the proxy would hand it to every pod")
						} else {
							ref, err := e.pull(t, "team-b", evil, tt.auth)
							require.NoError(t, err)
							assert.Equal(t, e.pushed.ConfigDigest, ref, "and to every pod with the liar's credential")
						}
						return
					}
					require.Error(t, err)
					assert.Equal(t, codes.PermissionDenied, status.Code(err), err)
					assert.Contains(t, status.Convert(err).Message(), "the registry did not serve the manifest")
					assert.Contains(t, status.Convert(err).Message(), evil)
					assert.Empty(t, leak.Scan(map[string]string{"error": err.Error()}, verifyPasswords["bob"], bobAuth,
						tt.auth.GetIdentityToken(), tt.auth.GetRegistryToken()), err.Error())
					assert.Positive(t, manifestGETs(liar.Requests()), "pullguard asked the liar for the bytes")

					st, err := e.backend.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: evil}, false)
					require.NoError(t, err)
					require.NotNil(t, st.GetImage(), "the backend did name tenant A's content")
					e.assertHidden(t, evil)

					// Another tenant's anonymous pod is refused too, by
					// the registry's bytes again: a registry that serves
					// none refuses the present image's manifest (404),
					// and the runtime is not asked; other bytes go to
					// the runtime's pull, whose check refuses them.
					before := manifestGETs(liar.Requests())
					_, err = e.pull(t, "team-c", evil, nil)
					wantCode := codes.PermissionDenied
					if mode == hostile.NoBytes {
						wantCode = codes.NotFound
					}
					assert.Equal(t, wantCode, status.Code(err), err)
					assert.Greater(t, manifestGETs(liar.Requests()), before)

					e.restart(t)
					e.assertHidden(t, evil)
					// Tenant A's image is still tenant A's.
					ref, err := e.pull(t, "team-a", e.pushed.Reference, basic("alice"))
					require.NoError(t, err)
					assert.Equal(t, e.pushed.ConfigDigest, ref)
				})
			}
		}
	}
}

// assertHidden checks that nothing records image as usable without a
// credential: ImageStatus reports it absent, a Never pod with no
// credential is refused, and no record names its repository with a
// credential or as node-accessible.
func (e *verifyEnv) assertHidden(t *testing.T, image string) {
	t.Helper()
	assert.False(t, e.present(t, image), "ImageStatus reports the name absent to every pod")
	d := e.tracker.Decide(credtracker.Request{Image: image, PullPolicy: corev1.PullNever, ImageRef: e.pushed.ConfigDigest, Names: []string{image}})
	assert.Equal(t, credtracker.FailNeverPull, d.Action, "a Never pod with nothing to show: %s", d.Reason)
	repo, err := credtracker.RepositoryName(image)
	require.NoError(t, err)
	for _, rec := range e.tracker.Records() {
		if rr := rec.Repositories[repo]; rr != nil {
			assert.False(t, rr.NodeAccessible, "recorded as node-accessible")
			assert.Empty(t, rr.Secrets, "recorded as a credential match")
			assert.Empty(t, rr.ServiceAccounts)
		}
	}
}

// TestLegitimatePullIsVerified: a registry that serves the bytes passes
// the check, for a tag and for a digest reference, and the credential is
// recorded (the next pull is answered from the record); a tenant the
// registry refuses gets the registry's error, not the check's.
func TestLegitimatePullIsVerified(t *testing.T) {
	e := newVerifyEnv(t, true)
	gets := func() int {
		n := 0
		for _, r := range e.reg.Requests() {
			if r.Method == http.MethodGet && r.Status == http.StatusOK && strings.Contains(r.Path, "/manifests/") {
				n++
			}
		}
		return n
	}
	for _, image := range []string{e.pushed.Reference, e.pushed.DigestReference} {
		before := gets()
		ref, err := e.pullAlways("team-c", image, basic("carol")) // forwarded
		require.NoError(t, err, image)
		require.False(t, e.present(t, image), "the puller asks the image's size")
		require.False(t, e.present(t, image), "the container's creation asks the image's user")
		assert.Equal(t, e.pushed.ConfigDigest, ref)
		assert.Equal(t, before+1, gets(), "%s: pullguard GET the manifest once, with carol's credential", image)
	}
	before := len(e.reg.Requests())
	ref, err := e.pull(t, "team-c", e.pushed.Reference, basic("carol"))
	require.NoError(t, err)
	assert.Equal(t, e.pushed.ConfigDigest, ref)
	assert.Equal(t, before, len(e.reg.Requests()), "answered from the record")
	assert.False(t, e.present(t, e.pushed.Reference), "still hidden from pods with nothing to show")

	// bob: the registry refuses serve's GET of the present image's
	// manifest, and that is the pull's answer, without the backend's pull
	// (the registry would refuse its HEAD the same).
	pulls := e.backend.Pulls()
	_, err = e.pull(t, "team-b", e.pushed.Reference, basic("bob"))
	require.Error(t, err)
	assert.Equal(t, codes.Unknown, status.Code(err), "the registry's refusal, as containerd gives it: %v", err)
	assert.Contains(t, status.Convert(err).Message(), "401 Unauthorized")
	assert.NotContains(t, status.Convert(err).Message(), "did not serve the manifest", "the registry's answer, not the check's")
	assert.Equal(t, pulls, e.backend.Pulls(), "the backend was not asked to pull")
}

// namingBackend reports every pull done and names the image it was given,
// with no registry: a runtime whose status gives no digest to check.
type namingBackend struct {
	*fakeruntime.ClaimTrusting
	id string
}

func (b namingBackend) PullImage(_ context.Context, spec *runtimeapi.ImageSpec, _ *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	b.Name(b.id, spec.GetImage())
	return b.id, nil
}

// TestVerifyFailsClosed: a backend that reports a pull done but no digest
// of the image in the pulled repository cannot be checked: the pull is
// refused without asking the verifier, and the name needs verification.
func TestVerifyFailsClosed(t *testing.T) {
	e := newVerifyEnv(t, true)
	const id = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	e.backend.Add(&runtimeapi.Image{Id: id, RepoDigests: []string{"registry.example/other/repo@sha256:" + strings.Repeat("a", 64)}})
	calls := 0
	srv, err := criproxy.New(namingBackend{e.backend, id}, e.tracker, e.tracker.Hasher(), criproxy.WithManifestVerification(guardedpull.VerifierFunc(
		func(context.Context, string, *runtimeapi.AuthConfig, []string) (string, error) {
			calls++
			return "", nil
		})))
	require.NoError(t, err)
	const image = "registry.example/x/y:1"
	_, err = srv.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}, SandboxConfig: pod("team-b", "p")})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), err)
	assert.Zero(t, calls, "no digest to expect: the verifier is not asked")
	resp, err := srv.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
	require.NoError(t, err)
	assert.Nil(t, resp.GetImage(), "the name needs verification")

	// A digest the runtime did resolve is what the verifier must accept.
	require.True(t, e.backend.Name(id, "registry.example/x/y@sha256:"+strings.Repeat("b", 64)))
	var expected []string
	srv, err = criproxy.New(namingBackend{e.backend, id}, e.tracker, e.tracker.Hasher(), criproxy.WithManifestVerification(guardedpull.VerifierFunc(
		func(_ context.Context, _ string, _ *runtimeapi.AuthConfig, exp []string) (string, error) {
			expected = exp
			return exp[0], nil
		})))
	require.NoError(t, err)
	_, err = srv.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}, SandboxConfig: pod("team-b", "p")})
	require.NoError(t, err)
	assert.Equal(t, []string{"sha256:" + strings.Repeat("b", 64)}, expected)
}

// BenchmarkForwardedPull is what the check adds to a forwarded pull: the
// backend's HEAD (as containerd's) alone, then with pullguard's GET of the
// manifest, against an in-process registry (anonymous pulls of a public
// image, which are always forwarded).
func BenchmarkForwardedPull(b *testing.B) {
	for _, verify := range []bool{false, true} {
		b.Run(fmt.Sprintf("verify=%t", verify), func(b *testing.B) {
			e := newVerifyEnv(b, verify)
			public, err := e.reg.Copy(context.Background(), "team-a/app:v1", "public/tool", "1")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := e.pullAlways("team-c", public.Reference, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
