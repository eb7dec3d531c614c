package criruntime_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/hostile"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// containerdMaxManifest is containerd's MaxManifestSize (4*1048*1048).
const containerdMaxManifest = 4393216

// testTimeout is the registry timeout of these tests.
const testTimeout = 300 * time.Millisecond

// slack is what a loaded machine (-race, two shared cores) may add to a
// bounded call beyond its timeout.
const slack = 2 * time.Second

// resourceModes are the hostile registry's attacks on a client, each with
// what the client's error must say.
var resourceModes = []struct {
	mode     hostile.Mode
	timedOut bool   // the error wraps ErrRegistryTimeout
	says     string // else, the error says this
	// allocated bounds what the process allocates during the call: 2 MiB,
	// or what reading a manifest up to its bound allocates: by doubling,
	// under 2.5 times the bound, twice that under the race detector
	// (whose append allocates twice as much).
	allocated int64
}{
	{mode: hostile.StallAfterHeaders, timedOut: true},
	{mode: hostile.OneBytePerSecond, timedOut: true},
	{mode: hostile.TLSStall, timedOut: true},
	{mode: hostile.HugeToken, says: "65536 byte"},
	{mode: hostile.HugeManifest, says: "larger than 4393216 bytes", allocated: 5 * containerdMaxManifest},
	{mode: hostile.RedirectLoop, says: "stopped after 5 redirects"},
	{mode: hostile.ManyChallenges, says: "server response headers exceeded 16384 bytes"},
	// containerd's parser copies the rest of the header for each escaped
	// parameter: about (15 KiB / 8) x 7.5 KiB, 14 MiB (twice that under
	// the race detector) for the longest header that passes the bound;
	// garbage at once, none of it kept.
	{mode: hostile.EscapedChallenge, says: "404 Not Found", allocated: 32 << 20},
}

// TestRegistryBounds: a registry that attacks its client's time or memory
// (internal/hostile's resource modes) fails the call within the registry
// timeout, with an error that names the host and the image and says what
// happened; it costs a few MiB at most and leaves no goroutine behind.
// Both ways pullguard reaches a registry are shown: the verification
// (VerifyManifest, through containerd's registry library) and the
// embedded runtime's pull (go-containerregistry).
func TestRegistryBounds(t *testing.T) {
	for _, tt := range resourceModes {
		for _, client := range []string{"verify", "embedded pull"} {
			t.Run(fmt.Sprintf("%s, %s", tt.mode, client), func(t *testing.T) {
				reg, err := hostile.Start("sha256:"+strings.Repeat("ab", 32), "application/vnd.docker.distribution.manifest.v2+json", tt.mode)
				require.NoError(t, err)
				t.Cleanup(reg.Close)
				image := reg.Host + "/evil/app:v1"
				// A mode that stalls meets a short timeout; any other, the
				// default, so that its bound, not the deadline, ends it.
				timeout := criruntime.DefaultRegistryTimeout
				if tt.timedOut {
					timeout = testTimeout
				}
				var call func() error
				release := func() {}
				switch client {
				case "verify":
					call = func() error {
						_, err := criruntime.VerifyManifest(context.Background(), image, basic("mallory", "mallory-pw"), nil,
							criruntime.WithRegistryTimeout(timeout))
						return err
					}
				default:
					e := newEmbedded(t, t.TempDir(), criruntime.WithRegistryTimeout(timeout))
					call = func() error {
						_, err := e.PullImage(context.Background(), spec(image), basic("mallory", "mallory-pw"), nil)
						return err
					}
					release = func() { require.NoError(t, e.Close(context.Background())) }
				}

				var err2 error
				c := hostile.Measure(func() { err2 = call() }, release)

				t.Logf("%s: %v\n%s", c, err2, reg.Log())
				require.Error(t, err2)
				assert.Contains(t, err2.Error(), reg.Host, "the error names the host")
				assert.Contains(t, err2.Error(), image, "the error names the image")
				if tt.timedOut {
					assert.ErrorIs(t, err2, criruntime.ErrRegistryTimeout)
					assert.ErrorIs(t, err2, context.DeadlineExceeded)
					assert.GreaterOrEqual(t, c.Elapsed, testTimeout, "the registry timeout ended it")
					assert.Less(t, c.Elapsed, testTimeout+slack)
				} else {
					assert.NotErrorIs(t, err2, criruntime.ErrRegistryTimeout)
					assert.Contains(t, err2.Error(), tt.says)
					assert.Less(t, c.Elapsed, slack, "its bound ended it, long before the deadline")
				}
				ceiling := tt.allocated
				if ceiling == 0 {
					ceiling = 2 << 20
				}
				assert.Less(t, c.Allocated, ceiling, "bytes allocated during the call")
				assert.Less(t, c.Kept, int64(1<<20), "heap kept after the call")
				assert.LessOrEqual(t, c.GoroutinesAfter, c.Goroutines, "goroutines back to their number")
				assert.NotEmpty(t, reg.Requests(), "the registry was asked")
			})
		}
	}
}

// TestCallerEnds: a call whose caller's own deadline passes first (the
// limit pkg/guardedpull gives all of a pull's checks) is the registry's
// timeout too, naming the host; a call the caller cancels ends with the
// caller's error.
func TestCallerEnds(t *testing.T) {
	reg, err := hostile.Start("sha256:"+strings.Repeat("ab", 32), "application/vnd.docker.distribution.manifest.v2+json", hostile.StallAfterHeaders)
	require.NoError(t, err)
	t.Cleanup(reg.Close)
	image := reg.Host + "/evil/app:v1"
	tests := []struct {
		name     string
		ctx      func() (context.Context, context.CancelFunc)
		want     error
		timedOut bool
	}{
		{name: "cancelled", want: context.Canceled, ctx: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				<-reg.Attacked()
				cancel()
			}()
			return ctx, cancel
		}},
		{name: "the caller's shorter deadline", want: context.DeadlineExceeded, timedOut: true, ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), testTimeout)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			_, err := criruntime.VerifyManifest(ctx, image, nil, nil)
			require.ErrorIs(t, err, tt.want)
			if !tt.timedOut {
				assert.NotErrorIs(t, err, criruntime.ErrRegistryTimeout)
				return
			}
			assert.ErrorIs(t, err, criruntime.ErrRegistryTimeout)
			assert.Contains(t, err.Error(), "registry "+reg.Host+" did not answer in time")
			assert.Contains(t, err.Error(), image)
		})
	}
}

// TestRefusalKeepsItsStatus: a refusal stays a refusal whatever its body
// and wherever it comes from (the manifest's host or the token server it
// names), so that a caller tells it from a timeout and from other
// failures.
func TestRefusalKeepsItsStatus(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		status  int
		want    error
	}{
		{name: "403 with a body over the error bound", status: http.StatusForbidden, want: criruntime.ErrUnauthorized,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`{"errors":[{"code":"DENIED","message":"` + big + `"}]}`))
			}},
		{name: "the token server refuses the credential", status: http.StatusUnauthorized, want: criruntime.ErrUnauthorized,
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/token" {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+r.Host+`/token",service="test"`)
				w.WriteHeader(http.StatusUnauthorized)
			}},
		{name: "404 with a body over the error bound", status: http.StatusNotFound, want: criruntime.ErrNotFound,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(big))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			t.Cleanup(srv.Close)
			image := strings.TrimPrefix(srv.URL, "http://") + "/team-a/app:v1"
			_, err := criruntime.VerifyManifest(context.Background(), image, basic("bob", "bob-pw"), nil)
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, tt.status, criruntime.StatusCode(err))
			assert.NotErrorIs(t, err, criruntime.ErrRegistryTimeout)
			assert.Less(t, len(err.Error()), 70<<10, "the error holds at most the error bound of the body")
			assert.NotContains(t, err.Error(), "bob-pw")
		})
	}
}

// TestEndlessBlobIsCutAtItsSize: a registry that answers a layer with
// bytes without end (more than the size its manifest gave) fails the
// embedded runtime's pull at once, having sent little more than that
// size, instead of filling the disk until the runtime's pull ends.
func TestEndlessBlobIsCutAtItsSize(t *testing.T) {
	config := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	layer := []byte("0123456789")
	configDigest, layerDigest := sha256Hex(config), sha256Hex(layer)
	manifest := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",`+
		`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":%d,"digest":%q},`+
		`"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","size":%d,"digest":%q}]}`,
		len(config), configDigest, len(layer), layerDigest)
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/manifests/v1"):
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			_, _ = w.Write([]byte(manifest))
		case strings.HasSuffix(r.URL.Path, "/blobs/"+configDigest):
			_, _ = w.Write(config)
		case strings.HasSuffix(r.URL.Path, "/blobs/"+layerDigest):
			w.(http.Flusher).Flush() // no length: the body decides
			chunk := []byte(strings.Repeat("x", 32<<10))
			for r.Context().Err() == nil {
				n, err := w.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(srv.Close)
	e := newEmbedded(t, t.TempDir())
	image := strings.TrimPrefix(srv.URL, "http://") + "/team-a/app:v1"

	_, err := e.PullImage(context.Background(), spec(image), nil, nil)

	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("larger than %d bytes", len(layer)))
	assert.Less(t, sent.Load(), int64(16<<20), "the registry sent %d bytes before the pull stopped reading", sent.Load())
	assert.Nil(t, status(t, e, image))
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
