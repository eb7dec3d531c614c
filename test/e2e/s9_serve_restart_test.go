package e2e

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Scenario 9, continued: the daemon restarts, containerd restarts, the
// registry goes down, and the daemon is SIGKILLed during a pull.
func TestServeRestarts(t *testing.T) {
	need(t)
	alice, bob, carol := newTenant("s9r-alice"), newTenant("s9r-bob"), newTenant("s9r-carol")
	h.issuer.grant(alice.user, "s9r/team-a/*", "pull")
	h.issuer.grant(carol.user, "s9r/team-a/*", "pull")
	image := push(t, "s9r/team-a/app", "v1", 911)
	root := newRoot(t)
	d := startServe(t, root)
	out, ok := crictlPull(t, d.endpoint(), "team-a", "app-1", image, alice)
	require.True(t, ok, out)

	t.Run("the daemon restarts", func(t *testing.T) {
		d.proc.stop()
		d.start(t)
		// No ImageStatus since the start: a pull is an Always container's,
		// which the registry checks (manifest only), as the kubelet would.
		m := mark(t)
		out, ok := crictlPullAlways(t, d.endpoint(), "team-a", "always", image, alice)
		require.True(t, ok, out)
		tf := trafficFor(t, m, "s9r/team-a/app")
		assert.Equal(t, verifiedPresentManifests, tf.manifestOK, "an Always pull of a present image asks the registry: pullguard's GET, which stands for the runtime's pull")
		assert.Zero(t, tf.blobs)

		assert.False(t, inspecti(t, d.endpoint(), image), "still hidden")
		m = mark(t)
		out, ok = crictlPull(t, d.endpoint(), "team-b", "intruder", image, bob)
		assert.False(t, ok, out)
		out, ok = crictlPull(t, d.endpoint(), "team-a", "app-2", image, alice)
		require.True(t, ok, out)
		tf = trafficFor(t, m, "s9r/team-a/app")
		assert.Zero(t, tf.manifestOK, "tenant A needed no registry")
		assert.Zero(t, tf.blobs)
	})

	t.Run("containerd restarts", func(t *testing.T) {
		h.containerd.stop()
		restarted := false
		t.Cleanup(func() {
			if !restarted { // leave the suite a containerd, whatever happened
				c, err := startContainerd(h.containerd.dir, h.containerd.log)
				require.NoError(t, err)
				h.containerd = c
			}
		})
		out, ok := crictl(t, d.endpoint(), "inspecti", image)
		assert.False(t, ok, "calls fail while containerd is down")
		assert.Contains(t, out, "Unavailable", "because containerd is down")
		select {
		case <-d.proc.done:
			t.Fatalf("the daemon exited when containerd went away:\n%s", d.log.all())
		default:
		}
		c, err := startContainerd(h.containerd.dir, h.containerd.log)
		require.NoError(t, err)
		h.containerd, restarted = c, true
		// The proxy's gRPC connection reconnects with its own back-off.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			out, _ := crictl(t, d.endpoint(), "inspecti", image)
			if !strings.Contains(out, "Unavailable") {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the proxy did not reconnect to containerd: %s", out)
			}
			time.Sleep(200 * time.Millisecond) // waiting on another process's reconnection, not on this test's timing
		}
		m := mark(t)
		out, ok = crictlPull(t, d.endpoint(), "team-a", "app-3", image, alice)
		require.True(t, ok, out)
		assert.Zero(t, registryRequests(t, m), "the records survived containerd's restart")
		assert.False(t, inspecti(t, d.endpoint(), image), "and the protection holds")
	})

	t.Run("the registry is down", func(t *testing.T) {
		h.registry.stop()
		t.Cleanup(func() { require.NoError(t, h.registry.start()) })
		out, ok := crictlPull(t, d.endpoint(), "team-a", "app-4", image, alice)
		assert.True(t, ok, "a recorded credential needs no registry: %s", out)
		out, ok = crictlPull(t, d.endpoint(), "team-c", "app", image, carol)
		assert.False(t, ok, "a credential to verify cannot be: %s", out)
		assert.False(t, inspecti(t, d.endpoint(), image))
	})

	t.Run("SIGKILL of the daemon during a pull", func(t *testing.T) {
		g := newGate(t)
		tool := push(t, "s9r/team-a/tool", "v1", 912)
		gated := strings.Replace(tool, host(), g.addr, 1)
		// As the kubelet: ImageStatus says absent, then the pull, which
		// runs while this goroutine waits for it to reach the blobs.
		require.False(t, inspecti(t, d.endpoint(), gated), "a new image")
		pull := startCrictl(t, d.endpoint(), pullArgs(t, "team-a", "tool", gated, alice)...)
		select {
		case <-g.blocked:
		case <-pull.done:
			out, _ := pull.result(t)
			t.Fatalf("the pull ended before it reached the registry's blobs: %s", out)
		case <-time.After(2 * time.Minute):
			t.Fatal("the pull never reached the registry's blobs")
		}
		d.kill() // the intent is on disk, the record never will be
		out, ok := pull.result(t)
		assert.False(t, ok, "the client sees the pull fail: %s", out)
		g.open()
		criPull(t, gated, alice) // what containerd stored of it (as in scenario 2)

		d.start(t)
		assert.False(t, inspecti(t, d.endpoint(), gated), "the interrupted pull's image needs verification")
		out, ok = crictlPull(t, d.endpoint(), "team-b", "tool", gated, bob)
		assert.False(t, ok, out)
		m := mark(t)
		out, ok = crictlPull(t, d.endpoint(), "team-a", "tool-2", gated, alice)
		require.True(t, ok, out)
		tf := trafficFor(t, m, "s9r/team-a/tool")
		assert.Equal(t, verifiedPresentManifests, tf.manifestOK, "even its own tenant verifies once")
		assert.Zero(t, tf.blobs)
	})
}

// gate is a reverse proxy in front of the registry that holds blob
// requests until it is opened: a pull that is in flight for as long as
// the test needs.
type gate struct {
	addr    string
	blocked chan struct{}
	once    sync.Once
	release chan struct{}
}

func newGate(t *testing.T) *gate {
	t.Helper()
	g := &gate{blocked: make(chan struct{}), release: make(chan struct{})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g.addr = l.Addr().String()
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: host()})
	// The token realm is the registry's own address; through the gate it
	// must be the gate's (go-containerregistry, which pullguard's
	// verification GET uses, refuses a realm on another private host:port).
	rp.ModifyResponse = func(resp *http.Response) error {
		if v := resp.Header.Get("Www-Authenticate"); v != "" {
			resp.Header.Set("Www-Authenticate", strings.ReplaceAll(v, host(), g.addr))
		}
		return nil
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") {
			g.once.Do(func() { close(g.blocked) })
			select {
			case <-g.release:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		g.open()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return g
}

func (g *gate) open() {
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}
