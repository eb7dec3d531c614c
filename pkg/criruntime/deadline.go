package criruntime

import (
	"context"
	"errors"
	"net"
	"time"
)

// registryCall is one bounded call to a registry: every request it makes
// (to every host tried, token fetches and redirects included) ends by its
// deadline, the registry timeout or the caller's, whichever comes first.
type registryCall struct {
	parent  context.Context
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
}

// startRegistryCall starts a call of at most timeout under parent.
func startRegistryCall(parent context.Context, timeout time.Duration) *registryCall {
	c := &registryCall{parent: parent, timeout: timeout}
	c.ctx, c.cancel = context.WithTimeout(parent, timeout)
	return c
}

// end ends the call and returns err as the caller should see it: a
// failure that a deadline (the call's, or the caller's: pkg/guardedpull
// gives a pull's checks one limit together), or a bound on one phase of
// a request (connecting, a TLS handshake, the wait for an answer's
// headers), caused becomes ErrRegistryTimeout naming host; any other
// error, the caller's cancellation and bytes that did not match
// included, is returned as it is.
func (c *registryCall) end(err error, host string) error {
	defer c.cancel()
	if err == nil || errors.Is(c.parent.Err(), context.Canceled) || errors.Is(err, ErrDigestMismatch) ||
		(!errors.Is(c.ctx.Err(), context.DeadlineExceeded) && !isTimeout(err)) {
		return err
	}
	if c.parent.Err() != nil {
		return &timeoutError{msg: "registry " + host + " did not answer in time"}
	}
	return registryTimeout(host, c.timeout)
}

// isTimeout says whether err is a network operation's timeout (net/http's
// TLS handshake and response header timeouts, a dial's, a deadline's).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
