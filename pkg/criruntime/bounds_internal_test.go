package criruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/boundedread"
)

// TestBoundPhases: each phase of a connection and of the wait for an
// answer is bounded by the registry timeout, or by the transport's own
// bound when shorter, and an answer's header by maxResponseHeader.
func TestBoundPhases(t *testing.T) {
	const timeout = 200 * time.Millisecond
	tests := []struct {
		name  string
		given *http.Transport
		check func(t *testing.T, got *http.Transport)
	}{
		{name: "net/http's defaults", given: http.DefaultTransport.(*http.Transport), check: func(t *testing.T, got *http.Transport) {
			assert.Equal(t, timeout, got.TLSHandshakeTimeout, "10s is longer")
			assert.Equal(t, timeout, got.ResponseHeaderTimeout, "none is longer")
			assert.Equal(t, int64(maxResponseHeader), got.MaxResponseHeaderBytes, "10 MB is more")
		}},
		{name: "shorter bounds stay", given: &http.Transport{TLSHandshakeTimeout: time.Millisecond, ResponseHeaderTimeout: 2 * time.Millisecond, MaxResponseHeaderBytes: 100},
			check: func(t *testing.T, got *http.Transport) {
				assert.Equal(t, time.Millisecond, got.TLSHandshakeTimeout)
				assert.Equal(t, 2*time.Millisecond, got.ResponseHeaderTimeout)
				assert.Equal(t, int64(100), got.MaxResponseHeaderBytes)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := boundPhases(tt.given, timeout)
			assert.NotSame(t, tt.given, got, "a copy: the given transport is not changed")
			tt.check(t, got)
		})
	}

	t.Run("a dial that never ends", func(t *testing.T) {
		var dials atomic.Int32
		stuck := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			<-ctx.Done() // a SYN that is never answered
			return nil, ctx.Err()
		}}
		client := &http.Client{Transport: boundPhases(stuck, timeout)}
		start := time.Now()
		_, err := client.Get("http://registry.example/v2/")
		elapsed := time.Since(start)
		require.Error(t, err)
		assert.True(t, isTimeout(err), "a timeout: %v", err)
		assert.GreaterOrEqual(t, elapsed, timeout)
		assert.Less(t, elapsed, timeout+2*time.Second)
		assert.Equal(t, int32(1), dials.Load())
	})
}

// TestBoundedTransport: the redirects before an answer and the bytes of
// its body are bounded for any client above the transport, whatever its
// own redirect policy and reads.
func TestBoundedTransport(t *testing.T) {
	var hops atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/loop":
			hops.Add(1)
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/body":
			n := 0
			fmt.Sscan(r.URL.Query().Get("n"), &n)
			if r.URL.Query().Get("length") == "" {
				w.Header().Set("Content-Type", "application/octet-stream") // chunked: no length
				w.(http.Flusher).Flush()
			} else {
				w.Header().Set("Content-Length", fmt.Sprint(n))
			}
			_, _ = w.Write([]byte(strings.Repeat("x", n)))
		}
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{
		Transport:     boundRegistryTransport(http.DefaultTransport, time.Second),
		CheckRedirect: func(*http.Request, []*http.Request) error { return nil }, // follows any number, as go-containerregistry's
	}
	t.Cleanup(client.CloseIdleConnections)

	t.Run("redirects", func(t *testing.T) {
		_, err := client.Get(srv.URL + "/loop")
		require.Error(t, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("stopped after %d redirects", maxRedirects))
		assert.Equal(t, int32(maxRedirects+1), hops.Load(), "the first request and its redirects")
	})

	tests := []struct {
		name    string
		ctx     context.Context
		n       int
		length  bool
		tooLong bool
	}{
		{name: "a token's bound, under", ctx: context.Background(), n: maxTokenBody},
		{name: "a token's bound, over", ctx: context.Background(), n: maxTokenBody + 1, tooLong: true},
		{name: "a token's bound, over, with a length", ctx: context.Background(), n: maxTokenBody + 1, length: true, tooLong: true},
		{name: "a manifest's bound", ctx: withBodyLimit(context.Background(), maxManifest), n: 1 << 20},
		{name: "a manifest's bound, over", ctx: withBodyLimit(context.Background(), 100), n: 101, tooLong: true},
		{name: "an empty blob", ctx: withBodyLimit(context.Background(), 0), n: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := fmt.Sprintf("%s/body?n=%d", srv.URL, tt.n)
			if tt.length {
				u += "&length=1"
			}
			req, err := http.NewRequestWithContext(tt.ctx, http.MethodGet, u, nil)
			require.NoError(t, err)
			resp, err := client.Do(req)
			var body []byte
			if err == nil {
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if tt.tooLong {
				require.Error(t, err)
				assert.True(t, errors.Is(err, boundedread.ErrTooLarge), "%v", err)
				assert.Contains(t, err.Error(), srv.Listener.Addr().String(), "names the host")
				return
			}
			require.NoError(t, err)
			assert.Len(t, body, tt.n)
		})
	}

	t.Run("a HEAD's length is not its body", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodHead, srv.URL+"/body?length=1&n=1000000", nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, int64(1000000), resp.ContentLength)
	})
}
