package criruntime_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/internal/critest"
	"github.com/pullguard/pullguard/internal/kubeletcri"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// scriptedImageServer answers every call with what the test set: a
// response, an error, or a wait until the call's context ends. It keeps
// the requests it got.
type scriptedImageServer struct {
	runtimeapi.UnimplementedImageServiceServer

	mu       sync.Mutex
	resp     proto.Message
	err      error
	hang     bool
	requests []proto.Message
}

func (s *scriptedImageServer) set(resp proto.Message, err error, hang bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resp, s.err, s.hang, s.requests = resp, err, hang, nil
}

func (s *scriptedImageServer) answer(ctx context.Context, req proto.Message) (proto.Message, error) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	resp, err, hang := s.resp, s.err, s.hang
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return resp, err
}

func (s *scriptedImageServer) got() []proto.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// reply is the scripted answer to req as the call's response type.
func reply[T proto.Message](ctx context.Context, s *scriptedImageServer, req proto.Message) (T, error) {
	resp, err := s.answer(ctx, req)
	if err != nil {
		var none T
		return none, err
	}
	return resp.(T), nil
}

func (s *scriptedImageServer) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return reply[*runtimeapi.ListImagesResponse](ctx, s, req)
}

func (s *scriptedImageServer) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return reply[*runtimeapi.ImageStatusResponse](ctx, s, req)
}

func (s *scriptedImageServer) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	return reply[*runtimeapi.PullImageResponse](ctx, s, req)
}

func (s *scriptedImageServer) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	return reply[*runtimeapi.RemoveImageResponse](ctx, s, req)
}

func (s *scriptedImageServer) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return reply[*runtimeapi.ImageFsInfoResponse](ctx, s, req)
}

// TestRemoteMatchesCRIClient is the differential test of NewRemote's
// client against k8s.io/cri-client's (the kubelet's): for each call and
// each answer a runtime can give, both send the runtime the same request
// and return the same result, or errors with the same text, the same gRPC
// code and the same kind (a status or a bare error).
func TestRemoteMatchesCRIClient(t *testing.T) {
	fake := &scriptedImageServer{}
	fake.set(&runtimeapi.ImageFsInfoResponse{}, nil, false) // the connection checks
	socket := critest.Serve(t, fake)
	ctx := context.Background()
	const timeout = time.Second
	lib, err := kubeletcri.New(ctx, socket, timeout)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lib.Close(ctx) })
	fwd, err := criruntime.NewRemote(ctx, socket, timeout)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fwd.Close(ctx) })

	img := &runtimeapi.Image{Id: "sha256:" + zeros, RepoTags: []string{"registry.example/a:v1"}, RepoDigests: []string{"registry.example/a@sha256:" + zeros}, Size: 1234, Pinned: true}
	spec := &runtimeapi.ImageSpec{Image: "registry.example/a:v1", Annotations: map[string]string{"io.kubernetes.pod.uid": "u1"}, RuntimeHandler: "runc"}
	auth := &runtimeapi.AuthConfig{Username: "alice", Password: "pw"}
	sandbox := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"}}
	filter := &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "registry.example/a:v1"}}
	many := &runtimeapi.ListImagesResponse{}
	for range 2000 {
		many.Images = append(many.Images, img)
	}

	type call func(svc criapi.ImageManagerService) (proto.Message, error)
	status := func(verbose bool) call {
		return func(svc criapi.ImageManagerService) (proto.Message, error) {
			resp, err := svc.ImageStatus(ctx, spec, verbose)
			return resp, err
		}
	}
	// pull pulls within d (0: no deadline of the caller's).
	pull := func(d time.Duration) call {
		return func(svc criapi.ImageManagerService) (proto.Message, error) {
			ctx := ctx
			if d > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			ref, err := svc.PullImage(ctx, spec, auth, sandbox)
			return &runtimeapi.PullImageResponse{ImageRef: ref}, err
		}
	}
	list := func(svc criapi.ImageManagerService) (proto.Message, error) {
		imgs, err := svc.ListImages(ctx, filter)
		return &runtimeapi.ListImagesResponse{Images: imgs}, err
	}
	remove := func(svc criapi.ImageManagerService) (proto.Message, error) {
		return &runtimeapi.RemoveImageResponse{}, svc.RemoveImage(ctx, spec)
	}
	fsInfo := func(svc criapi.ImageManagerService) (proto.Message, error) {
		resp, err := svc.ImageFsInfo(ctx)
		return resp, err
	}
	for _, tc := range []struct {
		name string
		call call
		resp proto.Message
		err  error
		hang bool
		// wantErr says whether the call fails (both must agree anyway).
		wantErr bool
	}{
		{name: "ImageStatus: present", call: status(false), resp: &runtimeapi.ImageStatusResponse{Image: img}},
		{name: "ImageStatus: verbose, with info", call: status(true), resp: &runtimeapi.ImageStatusResponse{Image: img, Info: map[string]string{"info": `{"k":"v"}`}}},
		{name: "ImageStatus: absent", call: status(false), resp: &runtimeapi.ImageStatusResponse{}},
		{name: "ImageStatus: no ID", call: status(false), resp: &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Size: 1}}, wantErr: true},
		{name: "ImageStatus: no size", call: status(false), resp: &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "sha256:" + zeros}}, wantErr: true},
		{name: "ImageStatus: NotFound", call: status(false), err: grpcstatus.Error(codes.NotFound, "no such image"), wantErr: true},
		{name: "ImageStatus: Unknown keeps its code", call: status(false), err: grpcstatus.Error(codes.Unknown, "boom"), wantErr: true},
		{name: "ImageStatus: the runtime hangs", call: status(false), hang: true, wantErr: true},
		{name: "PullImage: pulled", call: pull(0), resp: &runtimeapi.PullImageResponse{ImageRef: "sha256:" + zeros}},
		{name: "PullImage: no image reference", call: pull(0), resp: &runtimeapi.PullImageResponse{}, wantErr: true},
		{name: "PullImage: Unknown loses its code", call: pull(0), err: grpcstatus.Error(codes.Unknown, "failed to pull and unpack image: 401 Unauthorized"), wantErr: true},
		{name: "PullImage: another code is kept", call: pull(0), err: grpcstatus.Error(codes.ResourceExhausted, "too many pulls"), wantErr: true},
		{name: "PullImage: bounded by its context only", call: pull(200 * time.Millisecond), hang: true, wantErr: true},
		{name: "ListImages: a filter", call: list, resp: &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{img}}},
		{name: "ListImages: none", call: list, resp: &runtimeapi.ListImagesResponse{}},
		{name: "ListImages: 2 000 images (over a window of 64 KiB)", call: list, resp: many},
		{name: "ListImages: Unavailable", call: list, err: grpcstatus.Error(codes.Unavailable, "restarting"), wantErr: true},
		{name: "RemoveImage", call: remove, resp: &runtimeapi.RemoveImageResponse{}},
		{name: "RemoveImage: NotFound", call: remove, err: grpcstatus.Error(codes.NotFound, "gone"), wantErr: true},
		{name: "ImageFsInfo", call: fsInfo, resp: &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{Timestamp: 7, UsedBytes: &runtimeapi.UInt64Value{Value: 42}}}}},
		{name: "ImageFsInfo: Internal", call: fsInfo, err: grpcstatus.Error(codes.Internal, "disk"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var results [2]proto.Message
			var errs [2]error
			var requests [2][]proto.Message
			for i, svc := range []criapi.ImageManagerService{lib, fwd} {
				fake.set(tc.resp, tc.err, tc.hang)
				results[i], errs[i] = tc.call(svc)
				requests[i] = fake.got()
			}
			require.Len(t, requests[0], 1)
			require.Len(t, requests[1], 1)
			assert.True(t, proto.Equal(requests[0][0], requests[1][0]), "the runtime got\n%v\nfrom cri-client and\n%v\nfrom NewRemote's", requests[0][0], requests[1][0])
			if !tc.wantErr {
				require.NoError(t, errs[0])
				require.NoError(t, errs[1])
				assert.True(t, proto.Equal(results[0], results[1]), "cri-client returned\n%v\nNewRemote's\n%v", results[0], results[1])
				return
			}
			require.Error(t, errs[0])
			require.Error(t, errs[1])
			assert.Equal(t, grpcstatus.Code(errs[0]), grpcstatus.Code(errs[1]))
			_, libStatus := grpcstatus.FromError(errs[0])
			_, fwdStatus := grpcstatus.FromError(errs[1])
			assert.Equal(t, libStatus, fwdStatus, "a gRPC status from both, or a bare error from both")
			if tc.hang {
				// The text is gRPC's, and races: the caller's own deadline
				// ("context deadline exceeded") or the server's cancel
				// arriving first ("stream terminated by RST_STREAM").
				assert.Equal(t, codes.DeadlineExceeded, grpcstatus.Code(errs[0]))
				assert.Equal(t, codes.DeadlineExceeded, grpcstatus.Code(errs[1]))
				return
			}
			assert.Equal(t, errs[0].Error(), errs[1].Error())
		})
	}
}

// TestRemoteLogsNothing: a runtime's error can carry what a registry
// echoed (a hostile registry can echo the request's Authorization header
// into its error body). NewRemote's client returns it and logs nothing, so
// the caller's redaction is the only way it reaches a log; cri-client logs
// it itself, unredacted, through the caller's logger.
func TestRemoteLogsNothing(t *testing.T) {
	fake := &scriptedImageServer{}
	fake.set(&runtimeapi.ImageFsInfoResponse{}, nil, false)
	socket := critest.Serve(t, fake)
	const password = "s3cr3t-echoed"
	echoed := grpcstatus.Error(codes.Unknown, "failed to pull: 401 Unauthorized: {\"echo\":\"Basic YWxpY2U6"+password+"\"}")
	for _, tc := range []struct {
		name    string
		connect func(context.Context, string, time.Duration) (criapi.ImageManagerService, error)
		silent  bool
	}{
		{"NewRemote", criruntime.NewRemote, true},
		{"cri-client, for comparison", kubeletcri.New, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged []string
			var mu sync.Mutex
			logger := funcr.New(func(prefix, args string) {
				mu.Lock()
				defer mu.Unlock()
				logged = append(logged, prefix+" "+args)
			}, funcr.Options{Verbosity: 10})
			ctx := klog.NewContext(context.Background(), logger)
			fake.set(&runtimeapi.ImageFsInfoResponse{}, nil, false) // the connection checks
			svc, err := tc.connect(ctx, socket, time.Second)
			require.NoError(t, err)
			t.Cleanup(func() { _ = svc.Close(ctx) })
			for _, c := range []struct {
				resp proto.Message
				call func() error
			}{
				{nil, func() error {
					_, err := svc.PullImage(ctx, &runtimeapi.ImageSpec{Image: "registry.example/a:v1"}, &runtimeapi.AuthConfig{Username: "alice", Password: password}, nil)
					return err
				}},
				{nil, func() error {
					_, err := svc.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "registry.example/a:v1"}, false)
					return err
				}},
				{nil, func() error { _, err := svc.ListImages(ctx, nil); return err }},
				{nil, func() error { return svc.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: "registry.example/a:v1"}) }},
				{nil, func() error { _, err := svc.ImageFsInfo(ctx); return err }},
			} {
				fake.set(c.resp, echoed, false)
				err := c.call()
				require.Error(t, err)
				// Not assert.Contains: a failure would print the password.
				assert.True(t, strings.Contains(err.Error(), password), "the error is returned as the runtime gave it, for the caller to redact")
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.silent {
				assert.Empty(t, logged)
				return
			}
			leaked := 0
			for _, l := range logged {
				if strings.Contains(l, password) {
					leaked++
				}
			}
			t.Logf("cri-client logged %d lines, %d of them with the echoed password", len(logged), leaked)
		})
	}
}
