package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/imagemanager"
)

// progressInterval is how often a slow image is reported.
const progressInterval = 3 * time.Second

// progress reports an image that takes more than a moment, every few
// seconds, on standard error, so that standard output stays the result.
// CRI reports no byte counts while a pull runs, so the line gives the
// elapsed time; the Pulled event gives the size when it ends.
type progress struct {
	images interface {
		EnsureImageExists(context.Context, imagemanager.Request) (imagemanager.Result, error)
	}
	out   io.Writer
	clock clock.WithTicker
	every time.Duration
}

func (p *progress) EnsureImageExists(ctx context.Context, req imagemanager.Request) (imagemanager.Result, error) {
	start := p.clock.Now()
	ticker := p.clock.NewTicker(p.every)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-ticker.C():
				fmt.Fprintln(p.out, sanitize(fmt.Sprintf("pullguard: still ensuring %s for pod %s/%s: %s elapsed",
					req.Image, req.Pod.Namespace, req.Pod.Name, p.clock.Since(start).Round(time.Second))))
			}
		}
	}()
	defer func() {
		ticker.Stop()
		close(done)
		<-stopped
	}()
	return p.images.EnsureImageExists(ctx, req)
}
