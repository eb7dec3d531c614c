package credentialprovider

import (
	"context"
	"errors"
)

// flight is the shared context of one coalesced plugin run. The run is
// detached from any single caller's cancellation (several callers share
// it) but is canceled when every caller waiting for it has given up, or
// when the Manager is closed. It keeps the values (logger) of the caller
// that started it.
type flight struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool // unregisters the Manager-close hook
	refs   int
}

// flightResult is what a run produced and for which image.
type flightResult struct {
	entry    *cacheEntry
	image    string // repository name the plugin was asked about
	registry string
}

// covers reports whether the run's answer applies to the image: always for
// the same repository, for every image of the registry with a Registry
// key, and for every image with a Global key. Look-ups coalesced under a
// registry or global flight key check this and run the plugin for their
// own image when the answer turned out to be per image.
func (r *flightResult) covers(imageName, registry string) bool {
	switch r.entry.kind {
	case keyGlobal:
		return true
	case keyRegistry:
		return r.registry == registry
	default:
		return r.image == imageName
	}
}

// errRunAbandoned is the cancellation cause when every waiter left.
var errRunAbandoned = errors.New("every caller gave up")

// do runs fn once for every concurrent caller with the same key
// (golang.org/x/sync/singleflight) and waits for it or for ctx. A caller
// whose ctx ends gets ctx's error at once; the run is killed only when the
// last of its callers has left.
func (p *plugin) do(ctx context.Context, key string, fn func(context.Context) (*flightResult, error)) (*flightResult, error) {
	for attempt := 0; ; attempt++ {
		res, err := p.doOnce(ctx, key, fn)
		// A caller that joined a run just as its last waiter abandoned it
		// gets that run's cancellation; it still wants an answer, so it
		// tries once more with a fresh run.
		if err != nil && attempt == 0 && errors.Is(err, ErrPluginCanceled) && ctx.Err() == nil && p.m.ctx.Err() == nil {
			continue
		}
		return res, err
	}
}

func (p *plugin) doOnce(ctx context.Context, key string, fn func(context.Context) (*flightResult, error)) (*flightResult, error) {
	p.flightMu.Lock()
	f := p.flights[key]
	if f == nil {
		fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		f = &flight{ctx: fctx, cancel: cancel}
		f.stop = context.AfterFunc(p.m.ctx, func() { cancel(errManagerClosed) })
		p.flights[key] = f
	}
	f.refs++
	// Joined under the lock that counted it: a caller in refs is one the
	// flight's run answers, never one that, coming a moment late, starts
	// another run on f's context (DoChan only starts fn in a goroutine).
	ch := p.group.DoChan(key, func() (any, error) {
		defer func() {
			p.flightMu.Lock()
			if p.flights[key] == f {
				delete(p.flights, key)
			}
			p.flightMu.Unlock()
		}()
		return fn(f.ctx)
	})
	p.flightMu.Unlock()
	select {
	case r := <-ch:
		p.release(key, f)
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*flightResult), nil
	case <-ctx.Done():
		p.release(key, f)
		return nil, ctx.Err()
	}
}

// release drops one caller's reference; the last one out cancels the
// flight's context, which kills a run still in progress.
func (p *plugin) release(key string, f *flight) {
	p.flightMu.Lock()
	defer p.flightMu.Unlock()
	f.refs--
	if f.refs > 0 {
		return
	}
	if p.flights[key] == f {
		delete(p.flights, key)
	}
	f.stop()
	f.cancel(errRunAbandoned)
}
