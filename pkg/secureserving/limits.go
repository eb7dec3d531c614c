package secureserving

import (
	"net"
	"time"

	"golang.org/x/net/netutil"
)

// maxConnections bounds the connections served at once: a scraper needs
// one, a node has a few. More wait in the kernel's backlog.
const maxConnections = 32

// ioTimeout bounds each write, and a read the server left unbounded (the
// body of a request, a connection read while its handler runs); a
// variable for the tests.
var ioTimeout = 30 * time.Second

// readTimeout bounds every wait for a client's bytes: its request's
// headers (the server's own wait is 32 s) and the wait between requests
// of a kept-alive connection (90 s). A scraper sends its request at once
// and opens a connection again after a wait; a client on the node's
// network that holds connections open without a request, to take the
// maxConnections slots, loses each after readTimeout. A variable for the
// tests.
var readTimeout = 10 * time.Second

// boundListener bounds l's connections: their number, and their reads and
// writes in time. k8s.io/apiserver's SecureServingInfo.Serve builds the
// http.Server itself, with a 32 s ReadHeaderTimeout, 1 MiB of headers and
// a 90 s IdleTimeout but no ReadTimeout or WriteTimeout: a client that
// sends a body slowly, or reads an answer slowly, would hold its
// connection forever.
func boundListener(l net.Listener) net.Listener {
	return &boundedListener{Listener: netutil.LimitListener(l, maxConnections)}
}

type boundedListener struct{ net.Listener }

func (l *boundedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: c}, nil
}

// boundedConn never waits more than readTimeout for a read (net/http
// clears the read deadline once a request's headers are read, and sets
// its own, longer, for headers and idle connections), and each write must
// be done within ioTimeout.
type boundedConn struct{ net.Conn }

func (c *boundedConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(bounded(t))
}

func (c *boundedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(bounded(t))
}

func (c *boundedConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(ioTimeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// bounded is t, or readTimeout from now when t is unset or later.
func bounded(t time.Time) time.Time {
	limit := time.Now().Add(readTimeout)
	if t.IsZero() || t.After(limit) {
		return limit
	}
	return t
}
