package criproxy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/imageref"
	testingclock "k8s.io/utils/clock/testing"
)

// remoteImage is an image in the fake registry: its ID and who may pull
// it ("user:password" keys; "" means anonymous pulls are allowed).
type remoteImage struct {
	id      string
	allowed map[string]bool
}

// fakeBackend is an in-memory CRI image service in front of a fake
// registry. It counts registry requests the way containerd makes them: a
// pull is one manifest request, plus blob requests when the image is not
// yet present.
type fakeBackend struct {
	mu       sync.Mutex
	images   map[string]*runtimeapi.Image // by ID
	registry map[string]remoteImage       // by normalized name
	manifest int                          // manifest requests
	blobs    int                          // blob requests
	pulls    int                          // PullImage calls
	statuses int                          // ImageStatus calls
	down     bool                         // every call fails with Unavailable
	gate     chan struct{}                // when set, PullImage waits for it to close
	entered  chan string                  // when set, PullImage reports its image here
	// storeFirst makes PullImage store the image before it waits for
	// gate: a pull whose caller gives up after the runtime stored it.
	storeFirst bool
	uids       map[string]int64 // the USER of the images pulled, by ID
}

var _ criapi.ImageManagerService = (*fakeBackend)(nil)

func newFakeBackend() *fakeBackend {
	return &fakeBackend{images: map[string]*runtimeapi.Image{}, registry: map[string]remoteImage{}, uids: map[string]int64{}}
}

func norm(t testing.TB, image string) string {
	n, err := normalize(image)
	require.NoError(t, err)
	return n
}

// normalize is the name containerd stores image under (its grammar,
// distribution/reference's, is pkg/imageref's).
func normalize(image string) (string, error) {
	r, err := imageref.Parse(image)
	if err != nil {
		return "", err
	}
	return r.DockerRef(), nil
}

// publish puts an image in the fake registry under name.
func (f *fakeBackend) publish(t testing.TB, name, id string, users ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	allowed := map[string]bool{}
	for _, u := range users {
		allowed[u] = true
	}
	f.registry[norm(t, name)] = remoteImage{id: id, allowed: allowed}
}

// preload puts an image in the runtime under names, as a side-load would.
func (f *fakeBackend) preload(t testing.TB, id string, names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img := f.images[id]
	if img == nil {
		img = &runtimeapi.Image{Id: id, Size: 1234}
		f.images[id] = img
	}
	for _, n := range names {
		img.RepoTags = append(img.RepoTags, norm(t, n))
	}
}

func (f *fakeBackend) counts() (manifest, blobs, pulls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.manifest, f.blobs, f.pulls
}

func (f *fakeBackend) statusCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses
}

func (f *fakeBackend) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeBackend) find(image string) *runtimeapi.Image {
	if img, ok := f.images[image]; ok {
		return img
	}
	n, err := normalize(image)
	if err != nil {
		return nil
	}
	for _, img := range f.images {
		for _, tag := range img.RepoTags {
			if tag == n {
				return img
			}
		}
	}
	return nil
}

func unavailable() error { return status.Error(codes.Unavailable, "connection refused") }

func (f *fakeBackend) ListImages(_ context.Context, _ *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, unavailable()
	}
	var out []*runtimeapi.Image
	for _, img := range f.images {
		out = append(out, img)
	}
	return out, nil
}

func (f *fakeBackend) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses++
	if f.down {
		return nil, unavailable()
	}
	img := f.find(spec.GetImage())
	if img == nil {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: img, Info: map[string]string{"info": "verbose"}}, nil
}

func (f *fakeBackend) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	f.mu.Lock()
	gate, entered := f.gate, f.entered
	f.mu.Unlock()
	if entered != nil {
		entered <- spec.GetImage()
	}
	f.mu.Lock()
	storeFirst := f.storeFirst
	f.mu.Unlock()
	if storeFirst {
		if _, err := f.store(spec, auth); err != nil {
			return "", err
		}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return "", status.FromContextError(ctx.Err()).Err()
		}
	}
	return f.store(spec, auth)
}

func (f *fakeBackend) store(spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pulls++
	if f.down {
		return "", unavailable()
	}
	n, err := normalize(spec.GetImage())
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "bad image %q", spec.GetImage())
	}
	f.manifest++
	ri, ok := f.registry[n]
	if !ok {
		return "", status.Errorf(codes.NotFound, "failed to pull %q: not found", n)
	}
	who := ""
	if auth != nil {
		who = auth.GetUsername() + ":" + auth.GetPassword()
	}
	if !ri.allowed[who] && !ri.allowed[""] {
		return "", status.Errorf(codes.Unknown, "failed to pull and unpack image %q: failed to resolve reference: unexpected status from HEAD request: 401 Unauthorized", n)
	}
	img := f.images[ri.id]
	if img == nil {
		f.blobs += 2
		img = &runtimeapi.Image{Id: ri.id, Size: 1234}
		if u, ok := f.uids[ri.id]; ok {
			img.Uid = &runtimeapi.Int64Value{Value: u}
		}
		f.images[ri.id] = img
	}
	// A tag moves to the pulled image.
	for _, other := range f.images {
		for i, tag := range other.RepoTags {
			if tag == n && other != img {
				other.RepoTags = append(other.RepoTags[:i:i], other.RepoTags[i+1:]...)
			}
		}
	}
	if !contains(img.RepoTags, n) {
		img.RepoTags = append(img.RepoTags, n)
	}
	return ri.id, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (f *fakeBackend) RemoveImage(_ context.Context, spec *runtimeapi.ImageSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return unavailable()
	}
	if img := f.find(spec.GetImage()); img != nil {
		delete(f.images, img.Id)
	}
	return nil
}

func (f *fakeBackend) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, unavailable()
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{Timestamp: 1, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/fake"}}}}, nil
}

func (f *fakeBackend) Close(context.Context) error { return nil }

// harness is a proxy on a unix socket in front of a fake backend, and a
// CRI client (k8s.io/cri-client, as the kubelet uses) connected to it.
type harness struct {
	fake    *fakeBackend
	tracker credtracker.Tracker
	server  *criproxy.Server
	client  criapi.ImageManagerService
	socket  string
	dir     string
	clock   *testingclock.FakeClock
	pods    atomic.Int64 // pods made by newPod
}

type harnessConfig struct {
	policy    credtracker.Policy
	allowlist []string
	gateOff   bool
	dir       string // tracker directory; default a new one
	setup     func(f *fakeBackend)
	// serverOpts are more options for criproxy.New.
	serverOpts []criproxy.Option
}

// socketDir returns a short directory for unix sockets (their paths are
// limited to 107 bytes), removed at the end of the test.
func socketDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "pgcri")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newHarness(t testing.TB, cfg harnessConfig) *harness {
	t.Helper()
	h := &harness{fake: newFakeBackend(), dir: cfg.dir, clock: testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))}
	if cfg.setup != nil {
		cfg.setup(h.fake)
	}
	if h.dir == "" {
		h.dir = t.TempDir()
	}
	var hasher *credential.Hasher
	if cfg.gateOff {
		h.tracker = credtracker.Disabled()
		var err error
		hasher, err = credential.NewHasher(make([]byte, credential.KeySize))
		require.NoError(t, err)
	} else {
		tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: h.dir, Policy: cfg.policy, Allowlist: cfg.allowlist}, guardedpull.Inventory(h.fake))
		require.NoError(t, err)
		h.tracker, hasher = tr, tr.Hasher()
	}
	t.Cleanup(func() { h.tracker.Close() })
	h.fake.setDown(false) // a setup's "down" is for the tracker's start only
	srv, err := criproxy.New(h.fake, h.tracker, hasher, append([]criproxy.Option{criproxy.WithPruneInterval(0), criproxy.WithClock(h.clock), criproxy.WithClockStep(30 * time.Nanosecond)}, cfg.serverOpts...)...)
	require.NoError(t, err)
	h.server = srv
	h.socket = filepath.Join(socketDir(t), "pg.sock")
	h.serve(t)
	client, err := criruntime.NewRemote(context.Background(), "unix://"+h.socket, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close(context.Background()) })
	h.client = client
	return h
}

// serve starts a gRPC server for h.server on h.socket, stopped at the end
// of the test; it returns a function that stops it earlier.
func (h *harness) serve(t testing.TB) func() {
	lis, err := net.Listen("unix", h.socket)
	require.NoError(t, err)
	gs := criproxy.NewGRPCServer(h.server, testLogger())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return gs.Stop
}

// pod is a sandbox config for a pod of namespace ns.
func pod(ns, name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: ns, Name: name, Uid: ns + "-" + name + "-uid"}}
}

func creds(user, password string) *runtimeapi.AuthConfig {
	if user == "" {
		return nil
	}
	return &runtimeapi.AuthConfig{Username: user, Password: password}
}

// kubeletPod makes the image calls the kubelet (v1.36) makes for one pod.
// EnsureImageExists copies all the pod's annotations, the two the kubelet
// sets on every pod (kubernetes.io/config.source, kubernetes.io/config.seen)
// included, into the ImageSpec of its presence check, of its PullImage and
// of the size look-up after the pull; the container's user is asked with a
// bare spec (getImageUser).
type kubeletPod struct {
	h        *harness
	ns, name string
	ann      map[string]string
	handler  string
}

// newPod is a pod of ns as the kubelet sees it: its own annotations extra
// (a tenant writes them), then the kubelet's, over them.
func (h *harness) newPod(ns string, extra map[string]string) *kubeletPod {
	n := h.pods.Add(1)
	ann := map[string]string{}
	for k, v := range extra {
		ann[k] = v
	}
	ann["kubernetes.io/config.source"] = "api"
	ann["kubernetes.io/config.seen"] = time.Unix(1_800_000_000, n).UTC().Format(time.RFC3339Nano)
	return &kubeletPod{h: h, ns: ns, name: fmt.Sprintf("p%d", n), ann: ann}
}

func (p *kubeletPod) spec(image string) *runtimeapi.ImageSpec {
	return &runtimeapi.ImageSpec{Image: image, Annotations: p.ann, RuntimeHandler: p.handler}
}

// presence is the pod's presence check (GetImageRef): the image's ID, or
// "" if reported absent.
func (p *kubeletPod) presence(t testing.TB, image string) string {
	t.Helper()
	resp, err := p.h.client.ImageStatus(context.Background(), p.spec(image), false)
	require.NoError(t, err)
	return resp.GetImage().GetId()
}

// size is the puller's look-up right after a successful pull
// (GetImageSize): the same spec; 0 if reported absent.
func (p *kubeletPod) size(t testing.TB, image string) uint64 {
	t.Helper()
	resp, err := p.h.client.ImageStatus(context.Background(), p.spec(image), false)
	require.NoError(t, err)
	return resp.GetImage().GetSize()
}

// volumeRef is the kubelet's look-up of an image volume's digest for the
// pod's status, under its ImageVolumeWithDigest gate (v1.36
// kubelet_pods.go, convertToAPIContainerStatuses: GetImageRef, an
// ImageStatus, of kuberuntime.ToKubeContainerImageSpec of the mount's
// image as the runtime reports it). That image is the spec the kubelet
// mounted (getImageVolumes): Image the ref the pod's EnsureImageExists
// returned (the image's ID), the pod's annotations and runtime handler;
// the look-up sends Image, the annotations, and the handler under
// RuntimeClassInImageCriApi as the presence check does, not
// UserSpecifiedImage. It returns the ID, or "" if reported absent (the
// status's imageRef is then empty).
func (p *kubeletPod) volumeRef(t testing.TB, ref string) string {
	t.Helper()
	resp, err := p.h.client.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: ref, Annotations: p.ann, RuntimeHandler: p.handler}, false)
	require.NoError(t, err)
	return resp.GetImage().GetId()
}

// pullOnly is the pod's PullImage with the credential user:password.
func (p *kubeletPod) pullOnly(t testing.TB, image, user, password string) (string, error) {
	return p.h.client.PullImage(context.Background(), p.spec(image), creds(user, password), pod(p.ns, p.name))
}

// ensure is EnsureImageExists for an IfNotPresent container (or image
// volume) of the pod: the presence check, then, if reported absent,
// PullImage and the size look-up.
func (p *kubeletPod) ensure(t testing.TB, image, user, password string) (string, error) {
	if id := p.presence(t, image); id != "" {
		return id, nil
	}
	return p.ensureAlways(t, image, user, password)
}

// ensureAlways is EnsureImageExists for an Always container: PullImage with
// no presence check before it, then the size look-up.
func (p *kubeletPod) ensureAlways(t testing.TB, image, user, password string) (string, error) {
	ref, err := p.pullOnly(t, image, user, password)
	if err == nil {
		p.size(t, image)
	}
	return ref, err
}

// userLookup is the kubelet's look-up of a container's user at container
// creation (getImageUser): a bare spec. It returns the image's uid, or
// nil if reported absent (the kubelet then takes the image for root's).
func (h *harness) userLookup(t testing.TB, image string) *runtimeapi.Int64Value {
	t.Helper()
	resp, err := h.client.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: image}, false)
	require.NoError(t, err)
	if resp.GetImage() == nil {
		return nil
	}
	if u := resp.GetImage().GetUid(); u != nil {
		return u
	}
	return &runtimeapi.Int64Value{} // present, no USER: root
}

// pull ensures image as the kubelet does for an IfNotPresent container of
// a new pod of ns with the credential user:password: the presence check,
// then, if reported absent, PullImage.
func (h *harness) pull(t testing.TB, ns, image, user, password string) (string, error) {
	p := h.newPod(ns, nil)
	if id := p.presence(t, image); id != "" {
		return id, nil
	}
	return p.pullOnly(t, image, user, password)
}

// pullAlways pulls as the kubelet does for an Always container of a new
// pod of ns: PullImage with no ImageStatus before it.
func (h *harness) pullAlways(t testing.TB, ns, image, user, password string) (string, error) {
	return h.newPod(ns, nil).pullOnly(t, image, user, password)
}

// present says whether a new pod's presence check reports image present.
func (h *harness) present(t testing.TB, image string) bool {
	t.Helper()
	return h.newPod("probe", nil).presence(t, image) != ""
}

// legacyPull is what a client that sends no annotation does (crictl, a
// kubelet that sends no pod annotations): a bare ImageStatus, then, if
// reported absent, a bare PullImage.
func (h *harness) legacyPull(t testing.TB, ns, image, user, password string) (string, error) {
	if h.legacyPresent(t, image) {
		resp, err := h.client.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: image}, false)
		require.NoError(t, err)
		return resp.GetImage().GetId(), nil
	}
	return h.client.PullImage(context.Background(), &runtimeapi.ImageSpec{Image: image}, creds(user, password), pod(ns, "p"))
}

// legacyPresent is a bare ImageStatus.
func (h *harness) legacyPresent(t testing.TB, image string) bool {
	t.Helper()
	resp, err := h.client.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: image}, false)
	require.NoError(t, err)
	return resp.GetImage() != nil
}

func (h *harness) String() string { return fmt.Sprintf("proxy on %s", h.socket) }
