package pulltest

import (
	"context"
	"sync"
)

// endable is a context the fake runtime ends mid-pull with
// context.Canceled or context.DeadlineExceeded, as a kubelet that gives up
// on a pull ends it: at a chosen point, with no timer.
type endable struct {
	context.Context
	mu   sync.Mutex
	done chan struct{}
	err  error
}

func newEndable() *endable {
	return &endable{Context: context.Background(), done: make(chan struct{})}
}

func (c *endable) Done() <-chan struct{} { return c.done }

func (c *endable) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// end ends the context with err (once).
func (c *endable) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}
