package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// stepClock is a fake clock whose After fires at once, moving its time on
// by the duration waited.
type stepClock struct {
	now    time.Time
	waited []time.Duration
}

func (c *stepClock) Now() time.Time { return c.now }

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.now = c.now.Add(d)
	c.waited = append(c.waited, d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// TestDoctorWait: --wait checks again every 2s until no finding is a
// problem, or until the duration has passed, and returns the last report.
func TestDoctorWait(t *testing.T) {
	problem := doctorDoc{Problems: 1, Findings: []finding{{Severity: severityProblem, Check: "serve-answers"}}}
	healthy := doctorDoc{}
	tests := []struct {
		name         string
		wait         time.Duration
		reports      []doctorDoc // the checks' reports in turn; the last repeats
		wantChecks   int
		wantProblems int
		wantWaited   []time.Duration
	}{
		{name: "no --wait: one check", wait: 0, reports: []doctorDoc{problem}, wantChecks: 1, wantProblems: 1},
		{name: "healthy at once", wait: time.Minute, reports: []doctorDoc{healthy}, wantChecks: 1},
		{name: "healthy at the third check", wait: time.Minute, reports: []doctorDoc{problem, problem, healthy}, wantChecks: 3,
			wantWaited: []time.Duration{2 * time.Second, 2 * time.Second}},
		{name: "still a problem when the time is up", wait: 5 * time.Second, reports: []doctorDoc{problem}, wantChecks: 4, wantProblems: 1,
			wantWaited: []time.Duration{2 * time.Second, 2 * time.Second, time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			checks := 0
			var progress bytes.Buffer
			doc := waitForDoctor(context.Background(), clk, tt.wait, &progress, func() doctorDoc {
				r := tt.reports[min(checks, len(tt.reports)-1)]
				checks++
				return r
			})
			assert.Equal(t, tt.wantChecks, checks)
			assert.Equal(t, tt.wantProblems, doc.Problems)
			assert.Equal(t, tt.wantWaited, clk.waited)
			if len(tt.wantWaited) > 0 {
				assert.Contains(t, progress.String(), "doctor: 1 problem(s) (first: serve-answers), checking again in 2s")
			} else {
				assert.Empty(t, progress.String())
			}
		})
	}
}
