package criproxy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/textlogger"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// rawClient is a plain gRPC client of the proxy, for requests that
// cri-client would not send (malformed ones, streams).
func rawClient(t *testing.T, socket string) runtimeapi.ImageServiceClient {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewImageServiceClient(conn)
}

func TestPassThroughRPCs(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.fake.preload(t, id(1), reg+"/public/a:v1")
	h.fake.preload(t, id(2), reg+"/public/b:v1")
	ctx := context.Background()

	imgs, err := h.client.ListImages(ctx, nil)
	require.NoError(t, err)
	assert.Len(t, imgs, 2)

	fs, err := h.client.ImageFsInfo(ctx)
	require.NoError(t, err)
	require.Len(t, fs.GetImageFilesystems(), 1)
	assert.Equal(t, "/fake", fs.GetImageFilesystems()[0].GetFsId().GetMountpoint())

	stream, err := rawClient(t, h.socket).StreamImages(ctx, &runtimeapi.StreamImagesRequest{})
	require.NoError(t, err)
	var streamed int
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		streamed += len(resp.GetImages())
	}
	assert.Equal(t, 2, streamed)

	resp, err := h.client.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: reg + "/public/absent:v1"}, false)
	require.NoError(t, err)
	assert.Nil(t, resp.GetImage())
}

// TestRemoveImagePrunes checks image garbage collection through the CRI:
// removing an image prunes its records, and a later pull of the same
// image with another credential is verified (not answered from a stale
// record) and recorded afresh.
func TestRemoveImagePrunes(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, reg+"/team-a/app:v1", id(5), "alice:pw")
	_, err := h.pull(t, "a", reg+"/team-a/app:v1", "alice", "pw")
	require.NoError(t, err)
	require.Len(t, h.tracker.Records(), 1)

	require.NoError(t, h.client.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: id(5)}))
	assert.Empty(t, h.tracker.Records(), "the removed image's records are pruned")

	_, b0, _ := h.fake.counts()
	_, err = h.pull(t, "a", reg+"/team-a/app:v1", "alice", "pw")
	require.NoError(t, err)
	_, b1, _ := h.fake.counts()
	assert.Equal(t, 2, b1-b0, "the image is downloaded again")
	assert.Len(t, h.tracker.Records(), 1)
}

// TestListImagesPrunes: an image removed behind the proxy's back (on the
// runtime's own socket) loses its records at the next full ListImages.
func TestListImagesPrunes(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, reg+"/team-a/app:v1", id(5), "alice:pw")
	_, err := h.pull(t, "a", reg+"/team-a/app:v1", "alice", "pw")
	require.NoError(t, err)
	require.Len(t, h.tracker.Records(), 1)
	require.NoError(t, h.fake.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: id(5)}))
	_, err = h.client.ListImages(context.Background(), &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: id(5)}})
	require.NoError(t, err)
	assert.Len(t, h.tracker.Records(), 1, "a filtered list prunes nothing")
	_, err = h.client.ListImages(context.Background(), nil)
	require.NoError(t, err)
	assert.Empty(t, h.tracker.Records())
}

func TestMalformedRequests(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := rawClient(t, h.socket)
	ctx := context.Background()
	long := strings.Repeat("a", 1<<20)
	tests := []struct {
		name string
		call func() error
	}{
		{"ImageStatus without image", func() error { _, err := c.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{}); return err }},
		{"ImageStatus empty image", func() error {
			_, err := c.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{}})
			return err
		}},
		{"PullImage without image", func() error { _, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{}); return err }},
		{"PullImage invalid name", func() error {
			_, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "UPPER/Case::x"}, Auth: &runtimeapi.AuthConfig{Username: "u", Password: "p"}})
			return err
		}},
		{"PullImage huge name", func() error {
			_, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: long}})
			return err
		}},
		{"PullImage control characters", func() error {
			_, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "a\x00b\n:v1"}})
			return err
		}},
		{"RemoveImage without image", func() error { _, err := c.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{}); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, codes.InvalidArgument, status.Code(tc.call()))
		})
	}
	// Odd but valid requests are served: no sandbox config, an empty auth,
	// a bare "auth" field that is not base64.
	h.fake.publish(t, reg+"/public/app:v1", id(3), "")
	_, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: reg + "/public/app:v1"}, Auth: &runtimeapi.AuthConfig{}})
	assert.NoError(t, err)
	_, err = c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: reg + "/public/app:v1"}, Auth: &runtimeapi.AuthConfig{Auth: "%%%"}, SandboxConfig: &runtimeapi.PodSandboxConfig{}})
	assert.NoError(t, err, "a public image takes any credential")
	assert.True(t, h.present(t, reg+"/public/app:v1"), "and stays node-accessible")
}

// panicky is a backend whose ImageFsInfo panics.
type panicky struct{ *fakeBackend }

func (panicky) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	panic("backend bug")
}

func TestPanicIsInternal(t *testing.T) {
	fake := newFakeBackend()
	h, err := credential.NewHasher(make([]byte, credential.KeySize))
	require.NoError(t, err)
	srv, err := criproxy.New(panicky{fake}, credtracker.Disabled(), h)
	require.NoError(t, err)
	hs := &harness{server: srv, socket: socketDir(t) + "/pg.sock"}
	hs.serve(t)
	c := rawClient(t, hs.socket)
	_, err = c.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{})
	assert.Equal(t, codes.Internal, status.Code(err))
	_, err = c.ListImages(context.Background(), &runtimeapi.ListImagesRequest{})
	assert.NoError(t, err, "the server keeps serving")
}

// TestBackendUnavailableAndReconnect puts the proxy in front of a second
// gRPC image service reached through k8s.io/cri-client, as on a node: when
// that runtime goes away calls fail with Unavailable, and when it comes
// back on the same socket the proxy reconnects by itself.
func TestBackendUnavailableAndReconnect(t *testing.T) {
	runtime := &harness{fake: newFakeBackend(), socket: socketDir(t) + "/runtime.sock"}
	runtime.fake.preload(t, id(1), reg+"/public/app:v1")
	hasher, err := credential.NewHasher(make([]byte, credential.KeySize))
	require.NoError(t, err)
	runtime.server, err = criproxy.New(runtime.fake, credtracker.Disabled(), hasher)
	require.NoError(t, err)
	stopRuntime := runtime.serve(t)

	backend, err := criruntime.NewRemote(context.Background(), "unix://"+runtime.socket, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { backend.Close(context.Background()) })
	tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: t.TempDir()}, guardedpull.Inventory(backend))
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	srv, err := criproxy.New(backend, tr, tr.Hasher())
	require.NoError(t, err)
	proxy := &harness{server: srv, socket: socketDir(t) + "/pg.sock"}
	proxy.serve(t)
	c := rawClient(t, proxy.socket)
	status1 := func() error {
		_, err := c.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: reg + "/public/app:v1"}})
		return err
	}
	require.NoError(t, status1())

	stopRuntime()
	assert.Equal(t, codes.Unavailable, status.Code(status1()))
	_, err = c.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: reg + "/public/app:v1"}})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	// The runtime cannot say whether the pull stored the image: the intent
	// stays (fail closed), and the next start resolves it.
	assert.Equal(t, 1, tr.Status().Intents, "a failed pull whose runtime cannot be asked keeps its intent")

	runtime.serve(t)
	assert.Eventually(t, func() bool { return status1() == nil }, 20*time.Second, 50*time.Millisecond, "the proxy reconnects to the runtime")
}

// TestNoCredentialInLogsErrorsOrRecords pulls with credentials through
// every path at the highest verbosity and looks for them everywhere.
func TestNoCredentialInLogsErrorsOrRecords(t *testing.T) {
	var logs syncBuffer
	fake := newFakeBackend()
	tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: t.TempDir()}, guardedpull.Inventory(fake))
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(10), textlogger.Output(&logs)))
	srv, err := criproxy.New(fake, tr, tr.Hasher(), criproxy.WithLogger(logger))
	require.NoError(t, err)
	h := &harness{fake: fake, tracker: tr, server: srv, socket: socketDir(t) + "/pg.sock"}
	h.serve(t)
	h.client, err = criruntime.NewRemote(context.Background(), "unix://"+h.socket, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { h.client.Close(context.Background()) })

	secrets := []string{"alice-Sup3rSecret", "bob-Sup3rSecret"}
	fake.publish(t, reg+"/team-a/app:v1", id(4), "alice:"+secrets[0])
	var errs []string
	for _, s := range []struct{ user, pw string }{{"alice", secrets[0]}, {"alice", secrets[0]}, {"bob", secrets[1]}} {
		if _, err := h.pull(t, "ns", reg+"/team-a/app:v1", s.user, s.pw); err != nil {
			errs = append(errs, err.Error())
		}
	}
	h.present(t, reg+"/team-a/app:v1")
	require.NotEmpty(t, errs, "bob was refused")
	var recs bytes.Buffer
	for _, r := range tr.Records() {
		for name, rr := range r.Repositories {
			recs.WriteString(name)
			for _, s := range rr.Secrets {
				recs.WriteString(s.Namespace + s.Name + s.UID + s.Hash.String())
			}
		}
	}
	require.NotZero(t, logs.Len())
	for _, secret := range secrets {
		assert.NotContains(t, logs.String(), secret)
		assert.NotContains(t, strings.Join(errs, "\n"), secret)
		assert.NotContains(t, recs.String(), secret)
	}
	assert.Contains(t, recs.String(), criproxy.SourceNamePrefix, "the credential is recorded under its hash prefix")
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}
