package secureserving

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBoundedConn: a read the server leaves unbounded, and a write to a
// client that does not read, end after ioTimeout; a read the server gave
// a long deadline (its 32 s for headers, its 90 s idle wait) ends after
// readTimeout.
func TestBoundedConn(t *testing.T) {
	savedIO, savedRead := ioTimeout, readTimeout
	ioTimeout, readTimeout = 20*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { ioTimeout, readTimeout = savedIO, savedRead })
	cases := []struct {
		name string
		op   func(c net.Conn) error
	}{
		{name: "a read after the deadline was cleared", op: func(c net.Conn) error {
			require.NoError(t, c.SetReadDeadline(time.Time{}))
			_, err := c.Read(make([]byte, 1))
			return err
		}},
		{name: "a read after both deadlines were cleared", op: func(c net.Conn) error {
			require.NoError(t, c.SetDeadline(time.Time{}))
			_, err := c.Read(make([]byte, 1))
			return err
		}},
		{name: "a read the server gave its idle wait of 90 s", op: func(c net.Conn) error {
			require.NoError(t, c.SetReadDeadline(time.Now().Add(90*time.Second)))
			_, err := c.Read(make([]byte, 1))
			return err
		}},
		{name: "a read after a deadline of an hour on both", op: func(c net.Conn) error {
			require.NoError(t, c.SetDeadline(time.Now().Add(time.Hour)))
			_, err := c.Read(make([]byte, 1))
			return err
		}},
		{name: "a write nobody reads", op: func(c net.Conn) error {
			_, err := c.Write([]byte("metrics"))
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			server, client := net.Pipe()
			t.Cleanup(func() { server.Close(); client.Close() })
			err := c.op(&boundedConn{Conn: server})
			assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		})
	}
}

// TestBoundedConnKeepsDeadlines: a deadline the server sets is kept.
func TestBoundedConnKeepsDeadlines(t *testing.T) {
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	c := &boundedConn{Conn: server}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(-time.Second)))
	_, err := c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "a deadline in the past ends the read at once")
}
