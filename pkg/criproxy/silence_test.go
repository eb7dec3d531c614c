package criproxy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/criproxy"
)

// logLines collects a logger's lines, and signals each on ch.
type logLines struct {
	mu    sync.Mutex
	lines []string
	ch    chan string
}

func (l *logLines) sink(prefix, args string) {
	l.mu.Lock()
	l.lines = append(l.lines, prefix+" "+args)
	l.mu.Unlock()
	select {
	case l.ch <- args:
	default:
	}
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func newWatch(t *testing.T, bound time.Duration) (*criproxy.CallWatch, *clocktesting.FakeClock, *logLines) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	logs := &logLines{ch: make(chan string, 16)}
	return criproxy.NewCallWatch(clk, bound, funcr.New(logs.sink, funcr.Options{})), clk, logs
}

// TestCallWatchSilence: one warning when no call arrives for the bound
// (from the start, or from the last call), none while calls arrive
// within it, and one line when calls resume.
func TestCallWatchSilence(t *testing.T) {
	const bound = 2 * time.Minute
	type step struct {
		advance time.Duration
		call    bool // a call arrives after the advance, before the check
	}
	cases := []struct {
		name       string
		steps      []step
		wantSilent bool
		wantLogs   []string // substrings of the lines logged, in order
	}{
		{name: "calls within the bound", steps: []step{{advance: 90 * time.Second, call: true}, {advance: 90 * time.Second, call: true}, {advance: 119 * time.Second}}},
		{name: "no call since the start", steps: []step{{advance: 60 * time.Second}, {advance: 60 * time.Second}},
			wantSilent: true, wantLogs: []string{`"msg"="No image service call since serve started`}},
		{name: "one warning however long the silence", steps: []step{{advance: bound}, {advance: bound}, {advance: 10 * bound}},
			wantSilent: true, wantLogs: []string{`since serve started`}},
		{name: "silence after calls", steps: []step{{advance: time.Second, call: true}, {advance: bound}},
			wantSilent: true, wantLogs: []string{`"msg"="No image service call since the last one`}},
		{name: "calls resume", steps: []step{{advance: bound}, {advance: 30 * time.Second, call: true}, {advance: time.Minute}},
			wantLogs: []string{`since serve started`, `"msg"="Image service calls resumed" "silentFor"="2m30s"`}},
		{name: "silent again after resuming", steps: []step{{advance: bound}, {call: true}, {advance: bound}},
			wantSilent: true, wantLogs: []string{`since serve started`, `resumed`, `since the last one`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, clk, logs := newWatch(t, bound)
			for _, s := range tc.steps {
				clk.Step(s.advance)
				if s.call {
					w.Seen()
				}
				criproxy.CheckSilence(w)
			}
			st := w.Status()
			assert.Equal(t, tc.wantSilent, st.Silent, "silent")
			assert.Equal(t, bound, st.Bound)
			lines := logs.all()
			require.Len(t, lines, len(tc.wantLogs), "log lines: %q", lines)
			for i, want := range tc.wantLogs {
				assert.Contains(t, lines[i], want)
			}
		})
	}
}

// TestCallWatchRunAndInterceptor: Run's ticker finds the silence on the
// fake clock, and a call through the interceptor ends it.
func TestCallWatchRunAndInterceptor(t *testing.T) {
	w, clk, logs := newWatch(t, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	first := clk.Now()
	require.Eventually(t, clk.HasWaiters, 10*time.Second, time.Millisecond, "Run's ticker")
	clk.Step(time.Minute)
	select {
	case line := <-logs.ch:
		assert.Contains(t, line, "silentFor")
	case <-time.After(10 * time.Second):
		t.Fatal("no warning after a minute of silence")
	}
	st := w.Status()
	assert.True(t, st.Silent)
	assert.False(t, st.Calls)
	assert.Equal(t, first, st.Last)

	handled := false
	_, err := w.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.ImageService/ImageFsInfo"}, func(context.Context, any) (any, error) {
		handled = true
		return nil, nil
	})
	require.NoError(t, err)
	assert.True(t, handled, "the call went on to its handler")
	st = w.Status()
	assert.False(t, st.Silent)
	assert.True(t, st.Calls)
	assert.Equal(t, clk.Now(), st.Last)
	assert.True(t, strings.Contains(fmt.Sprint(logs.all()), "resumed"), "logs: %q", logs.all())
}

// TestCallWatchCountsFromRun: the silence counts from Run, which serve
// calls once it serves: the time it waited for its runtime before, when
// no kubelet could call, is no silence.
func TestCallWatchCountsFromRun(t *testing.T) {
	const bound = time.Minute
	w, clk, logs := newWatch(t, bound)
	clk.Step(10 * bound) // serve waits for its runtime
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, clk.HasWaiters, 10*time.Second, time.Millisecond, "Run's ticker")
	start := clk.Now()
	st := w.Status()
	assert.False(t, st.Silent)
	assert.Equal(t, start, st.Last, "the silence counts from Run")

	clk.Step(bound)
	select {
	case line := <-logs.ch:
		assert.Contains(t, line, `"silentFor"="1m0s"`)
	case <-time.After(10 * time.Second):
		t.Fatal("no warning a bound after Run")
	}
	assert.Len(t, logs.all(), 1, "one warning: %q", logs.all())
}
