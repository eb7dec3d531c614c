package criruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/containerd/containerd/v2/core/remotes/docker"

	"github.com/pullguard/pullguard/internal/boundedread"
)

// What one registry answer may cost. A registry is chosen by whoever
// names an image, so each of its answers is bounded in time (see
// WithRegistryTimeout) and in size, on every request pullguard makes to
// it: manifests, token fetches, redirects, error bodies, blobs.
const (
	// DefaultRegistryTimeout is how long one verification of a pull may
	// take at a registry by default (see WithRegistryTimeout): well under
	// the kubelet's runtimeRequestTimeout (2 minutes), and far above what
	// a registry that answers takes (a manifest GET and a token fetch,
	// well under a second).
	DefaultRegistryTimeout = 30 * time.Second

	// maxTokenBody bounds every answer body that is neither a manifest
	// nor a blob: token answers, error bodies, pings. A token answer is
	// a JWT or an OAuth access token in a small JSON object: Docker Hub's
	// (the JWT twice, as token and access_token) is a few KiB, GCR's and
	// Artifact Registry's OAuth tokens and Harbor's, Quay's and ACR's JWTs
	// 1 to 4 KiB; ECR answers Basic challenges and fetches none. 64 KiB
	// is over ten times the largest, and is the bound go-containerregistry
	// puts on its own token and error reads, so that both runtimes stop at
	// the same size.
	maxTokenBody = 64 << 10
	// maxResponseHeader bounds the header bytes of one answer (net/http's
	// default is 10 MB). Registries send a few KiB at most (a challenge,
	// a CDN's signed Location); the proxies in front of them refuse more
	// than 4 to 16 KiB (nginx's proxy_buffer_size, HAProxy's bufsize).
	maxResponseHeader = 16 << 10
	// maxRedirects bounds the redirects before one answer (net/http
	// follows 10, go-containerregistry any number). Registries redirect
	// once, a blob to its storage or CDN; a CDN may add one more.
	maxRedirects = 5
)

// maxManifest bounds a manifest or index served by a registry:
// containerd's own bound (MaxManifestSize, the distribution spec's 4 MiB
// as containerd writes it), so that serve can verify every manifest
// containerd pulls, and the embedded runtime pulls what containerd pulls.
var maxManifest = docker.MaxManifestSize

// ErrRegistryTimeout: a registry did not answer in time (see
// WithRegistryTimeout). The errors that wrap it also wrap
// context.DeadlineExceeded, and name the registry host and the image.
var ErrRegistryTimeout = errors.New("the registry did not answer in time")

// timeoutError is a registry that did not answer in time.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Unwrap() []error { return []error{ErrRegistryTimeout, context.DeadlineExceeded} }

func registryTimeout(host string, timeout time.Duration) error {
	return &timeoutError{msg: fmt.Sprintf("registry %s did not answer within %s", host, timeout)}
}

type bodyLimitKey struct{}

// withBodyLimit lets the requests made with the returned context receive
// answer bodies of up to n bytes (a manifest's bound, a blob's size); any
// other request's are bounded by maxTokenBody. Only pullguard's own code
// marks a context: a registry names token realms and redirect targets,
// never their bound.
func withBodyLimit(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, bodyLimitKey{}, n)
}

func bodyLimit(ctx context.Context) int64 {
	if n, ok := ctx.Value(bodyLimitKey{}).(int64); ok && n >= 0 {
		return n
	}
	return maxTokenBody
}

// boundedTransport bounds what the answer to one request may cost beyond
// its time: the redirects that lead to it (maxRedirects) and the bytes
// of its body (withBodyLimit), for every client above it, whatever its
// own CheckRedirect and reads.
type boundedTransport struct {
	inner http.RoundTripper
}

// boundRegistryTransport returns rt with every bound of a registry
// request: the time of each phase of a connection and of the wait for an
// answer (timeout each; see boundPhases, for an *http.Transport), the
// size of the answer's header, the redirects and the body's bytes.
func boundRegistryTransport(rt http.RoundTripper, timeout time.Duration) *boundedTransport {
	if t, ok := rt.(*http.Transport); ok {
		rt = boundPhases(t, timeout)
	}
	return &boundedTransport{inner: rt}
}

func (b *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	hops := 0
	for r := req; r.Response != nil && r.Response.Request != nil; r = r.Response.Request {
		hops++
	}
	if hops > maxRedirects {
		return nil, fmt.Errorf("%s: stopped after %d redirects", req.URL.Host, maxRedirects)
	}
	resp, err := b.inner.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	limit := bodyLimit(req.Context())
	if req.Method != http.MethodHead && resp.ContentLength > limit {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: the answer of %s is %d bytes, more than %d", boundedread.ErrTooLarge, req.URL.Host, resp.ContentLength, limit)
	}
	resp.Body = &boundedBody{r: boundedread.NewReader(resp.Body, limit), body: resp.Body, host: req.URL.Host, limit: limit}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the transport
// below, for http.Client.CloseIdleConnections.
func (b *boundedTransport) CloseIdleConnections() {
	if c, ok := b.inner.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// boundedBody is an answer's body cut at its bound, with an error that
// names the host.
type boundedBody struct {
	r     io.Reader
	body  io.ReadCloser
	host  string
	limit int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, boundedread.ErrTooLarge) {
		err = fmt.Errorf("%w: the answer of %s is larger than %d bytes", boundedread.ErrTooLarge, b.host, b.limit)
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.body.Close() }

// boundPhases returns a copy of t on which connecting (each dial, a
// proxy's included), the TLS handshake and the wait for an answer's
// headers last at most timeout each (or t's own bound, if shorter: a
// hosts.toml dial_timeout, containerd's 10-second handshake), and an
// answer's header is at most maxResponseHeader bytes.
func boundPhases(t *http.Transport, timeout time.Duration) *http.Transport {
	t = t.Clone()
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel() // a connection, once made, outlives its dial's context
		return dial(ctx, network, addr)
	}
	t.TLSHandshakeTimeout = shorter(t.TLSHandshakeTimeout, timeout)
	t.ResponseHeaderTimeout = shorter(t.ResponseHeaderTimeout, timeout)
	if t.MaxResponseHeaderBytes <= 0 || t.MaxResponseHeaderBytes > maxResponseHeader {
		t.MaxResponseHeaderBytes = maxResponseHeader
	}
	return t
}

// shorter is the shorter of a bound d (0: none) and timeout.
func shorter(d, timeout time.Duration) time.Duration {
	if d <= 0 || d > timeout {
		return timeout
	}
	return d
}
