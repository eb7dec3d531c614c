package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// doctorRecheck is how long --wait waits between two checks.
const doctorRecheck = 2 * time.Second

// waitClock is the clock --wait reads: k8s.io/utils/clock's RealClock, a
// fake in tests.
type waitClock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// checkUntil checks once, or, with --wait, again every doctorRecheck until
// no finding is a problem or --wait has passed (or ctx ends), saying on
// progress why it checks again. It returns the last report.
func (o *doctorOptions) checkUntil(ctx context.Context, progress io.Writer) doctorDoc {
	return waitForDoctor(ctx, o.clock, o.wait, progress, func() doctorDoc { return o.check(ctx) })
}

func waitForDoctor(ctx context.Context, clk waitClock, wait time.Duration, progress io.Writer, check func() doctorDoc) doctorDoc {
	deadline := clk.Now().Add(wait)
	for {
		doc := check()
		left := deadline.Sub(clk.Now())
		if doc.Problems == 0 || left <= 0 {
			return doc
		}
		pause := min(doctorRecheck, left)
		fmt.Fprintf(progress, "doctor: %d problem(s) (first: %s), checking again in %s (%s left of --wait)\n",
			doc.Problems, firstProblem(doc), pause, left.Round(time.Second))
		select {
		case <-ctx.Done():
			return doc
		case <-clk.After(pause):
		}
	}
}

func firstProblem(doc doctorDoc) string {
	for _, f := range doc.Findings {
		if f.Severity == severityProblem {
			return f.Check
		}
	}
	return ""
}
