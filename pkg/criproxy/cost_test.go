package criproxy_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/registry"
)

// quietRuntime models containerd's CRI image service without its
// registry traffic, so that a registry's log holds serve's requests only:
// a pull by a reader names the image the registry holds under the name
// (the same image when it is present already), anyone else's fails as a
// registry's 401 would.
type quietRuntime struct {
	mu      sync.Mutex
	image   *runtimeapi.Image // the registry's image under name, once pulled
	pending *runtimeapi.Image // what a pull stores
	readers []string
	pulls   int
}

var _ criapi.ImageManagerService = (*quietRuntime)(nil)

func (q *quietRuntime) PullImage(_ context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pulls++
	if !slices.Contains(q.readers, auth.GetUsername()) {
		return "", status.Errorf(codes.Unknown, "failed to pull and unpack image %q: 401 Unauthorized", spec.GetImage())
	}
	q.image = q.pending
	return q.image.Id, nil
}

func (q *quietRuntime) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.image != nil && (spec.GetImage() == q.image.Id || slices.Contains(criruntime.ImageNames(q.image), spec.GetImage())) {
		return &runtimeapi.ImageStatusResponse{Image: q.image}, nil
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (q *quietRuntime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.image == nil {
		return nil, nil
	}
	return []*runtimeapi.Image{q.image}, nil
}

func (q *quietRuntime) RemoveImage(context.Context, *runtimeapi.ImageSpec) error { return nil }

func (q *quietRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (q *quietRuntime) Close(context.Context) error { return nil }

func (q *quietRuntime) pulled() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pulls
}

// TestVerificationCost: what serve itself asks the registry, per case,
// and whether the runtime is asked to pull (containerd: HEAD 401, HEAD 200
// for a present image; the manifest, config and layers for a first pull),
// request by request, on a node without registry configuration and on a
// mirrored node (containerd's hosts.toml sends the registry's name to a
// TLS mirror with a CA of its own, before the upstream): the same
// requests, at the mirror, and none upstream unless the mirror refused.
func TestVerificationCost(t *testing.T) {
	const manifest = "/v2/team-a/app/manifests/v1"
	steps := []struct {
		name      string
		user      string
		always    bool // an Always pull: no presence check before it
		wantErr   bool
		wantPulls int // the runtime's
		want      []string
		// refused: on a mirrored node, the upstream is asked the same
		// after the mirror refused, as containerd asks it.
		refused bool
	}{
		{name: "first pull: the runtime's pull, then one authenticated manifest GET", user: "alice", wantPulls: 1,
			want: []string{"GET " + manifest + " 401", "GET " + manifest + " 200"}},
		{name: "present image, a credential that pulled it: nothing", user: "alice"},
		{name: "present image, a new credential: one authenticated manifest GET, no runtime pull", user: "carol",
			want: []string{"GET " + manifest + " 401", "GET " + manifest + " 200"}},
		{name: "present image, a refused credential: its manifest GET, and no runtime pull", user: "bob", wantErr: true, refused: true,
			want: []string{"GET " + manifest + " 401", "GET " + manifest + " 401"}},
		{name: "an Always pull of a present image: one authenticated manifest GET, no runtime pull", user: "carol", always: true,
			want: []string{"GET " + manifest + " 401", "GET " + manifest + " 200"}},
		{name: "an Always pull with a refused credential: its manifest GET, and no runtime pull", user: "bob", always: true, wantErr: true, refused: true,
			want: []string{"GET " + manifest + " 401", "GET " + manifest + " 401"}},
	}
	for _, mirrored := range []bool{false, true} {
		t.Run(fmt.Sprintf("mirrored=%t", mirrored), func(t *testing.T) {
			account := registry.Config{
				Users:        []registry.User{{Name: "alice", Password: "alice-pw"}, {Name: "carol", Password: "carol-pw"}, {Name: "bob", Password: "bob-pw"}},
				Repositories: []registry.Repository{{Name: "team-a/app", Readers: []string{"alice", "carol"}}},
			}
			upstream, err := registry.New(account, registry.WithBcryptCost(bcrypt.MinCost))
			require.NoError(t, err)
			t.Cleanup(func() { _ = upstream.Close() })
			img, err := registry.Image(31, 1, 256)
			require.NoError(t, err)
			pushed, err := upstream.Push(context.Background(), "team-a/app", "v1", img)
			require.NoError(t, err)
			image, served, configPath := pushed.Reference, upstream, t.TempDir()
			if mirrored {
				mirror, err := registry.New(account, registry.WithBcryptCost(bcrypt.MinCost))
				require.NoError(t, err)
				t.Cleanup(func() { _ = mirror.Close() })
				_, err = mirror.Push(context.Background(), "team-a/app", "v1", img)
				require.NoError(t, err)
				tlsMirror := httptest.NewUnstartedServer(mirror)
				tlsMirror.StartTLS()
				t.Cleanup(tlsMirror.Close)
				ca := filepath.Join(configPath, "mirror-ca.pem")
				require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsMirror.Certificate().Raw}), 0o600))
				require.NoError(t, os.MkdirAll(filepath.Join(configPath, "registry.example"), 0o755))
				hosts := fmt.Sprintf("server = \"http://%s\"\n[host.\"https://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n",
					upstream.Host(), tlsMirror.Listener.Addr().String(), ca)
				require.NoError(t, os.WriteFile(filepath.Join(configPath, "registry.example", "hosts.toml"), []byte(hosts), 0o600))
				image, served = "registry.example/team-a/app:v1", mirror
			}
			repo := strings.TrimSuffix(image, ":v1")
			rt := &quietRuntime{readers: []string{"alice", "carol"}, pending: &runtimeapi.Image{Id: pushed.ConfigDigest, RepoTags: []string{image},
				RepoDigests: []string{repo + "@" + pushed.Digest}, Size: 256}}
			tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: t.TempDir()}, guardedpull.Inventory(rt))
			require.NoError(t, err)
			t.Cleanup(func() { _ = tr.Close() })
			srv, err := criproxy.New(rt, tr, tr.Hasher(), criproxy.WithLogger(testLogger()),
				criproxy.WithManifestVerification(guardedpull.RegistryVerifier(criruntime.WithRegistryConfigPath(configPath))))
			require.NoError(t, err)

			for i, st := range steps {
				upstream.Reset()
				served.Reset()
				pulls := rt.pulled()
				spec := &runtimeapi.ImageSpec{Image: image, Annotations: map[string]string{
					"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": time.Unix(1_800_000_000, int64(i)).UTC().Format(time.RFC3339Nano)}}
				ctx := context.Background()
				var pullErr error
				if st.always {
					_, pullErr = srv.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, Auth: creds(st.user, st.user+"-pw"), SandboxConfig: pod("team-a", st.name)})
				} else if resp, err := srv.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec}); assert.NoError(t, err, st.name) && resp.GetImage() == nil {
					var pr *runtimeapi.PullImageResponse
					pr, pullErr = srv.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, Auth: creds(st.user, st.user+"-pw"), SandboxConfig: pod("team-a", st.name)})
					if pullErr == nil {
						assert.Equal(t, pushed.ConfigDigest, pr.GetImageRef(), "%s: the runtime's image ref", st.name)
					}
				}
				if st.wantErr {
					assert.Error(t, pullErr, st.name)
				} else {
					assert.NoError(t, pullErr, st.name)
				}
				want := st.want
				if want == nil {
					want = []string{}
				}
				assert.Equal(t, want, seen(served), "%s: the registry's requests", st.name)
				switch {
				case mirrored && st.refused:
					assert.Equal(t, want, seen(upstream), "%s: the upstream's requests after the mirror's refusal", st.name)
				case mirrored:
					assert.Empty(t, seen(upstream), "%s: the upstream is not asked", st.name)
				}
				assert.Equal(t, st.wantPulls, rt.pulled()-pulls, "%s: the runtime's pulls", st.name)
			}
		})
	}
}

// seen is each request a registry answered, as "METHOD path status".
func seen(reg *registry.Registry) []string {
	out := []string{}
	for _, r := range reg.Requests() {
		out = append(out, fmt.Sprintf("%s %s %d", r.Method, r.Path, r.Status))
	}
	return out
}
