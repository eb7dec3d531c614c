package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/imagemanager"
)

// slowImages blocks EnsureImageExists until release is closed.
type slowImages struct {
	started chan struct{}
	release chan struct{}
}

func (s *slowImages) EnsureImageExists(context.Context, imagemanager.Request) (imagemanager.Result, error) {
	close(s.started)
	<-s.release
	return imagemanager.Result{ImageRef: "sha256:abc", Pulled: true}, nil
}

// syncBuffer is a bytes.Buffer safe for the progress goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// lines receives a value for each line written.
	lines chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	for range bytes.Count(p, []byte("\n")) {
		s.lines <- struct{}{}
	}
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProgressReportsEveryFewSeconds(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	images := &slowImages{started: make(chan struct{}), release: make(chan struct{})}
	out := &syncBuffer{lines: make(chan struct{}, 16)}
	p := &progress{images: images, out: out, clock: clk, every: 3 * time.Second}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app"}}

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := p.EnsureImageExists(context.Background(), imagemanager.Request{Pod: pod, Image: "registry.example/app:v1\x1b[2J"})
		assert.NoError(t, err)
	}()
	<-images.started
	require.True(t, clk.HasWaiters(), "the ticker is made before the image is asked for")
	for i := 1; i <= 3; i++ {
		clk.Step(3 * time.Second)
		<-out.lines
	}
	close(images.release)
	<-done
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, "one line every 3 seconds, not once")
	for i, l := range lines {
		assert.Contains(t, l, "team-a/app")
		assert.Contains(t, l, (time.Duration(i+1)*3*time.Second).String()+" elapsed")
		assert.NotContains(t, l, "\x1b", "names are escaped")
	}
	clk.Step(10 * time.Second)
	assert.Len(t, strings.Split(strings.TrimSpace(out.String()), "\n"), 3, "nothing after the image is ensured")
}

func TestSanitize(t *testing.T) {
	tests := []struct{ in, want string }{
		{in: "plain text: 401 Unauthorized", want: "plain text: 401 Unauthorized"},
		{in: "a\nb\r\tc", want: `a\nb\r\tc`},
		{in: "\x1b[31mred", want: `\x1b[31mred`},
		{in: "bidi \u202e override \u2066", want: `bidi \u202e override \u2066`},
		{in: "c1 \u0085 \u009b", want: `c1 \x85 \x9b`},
		{in: "bad utf8 \xff", want: `bad utf8 \xff`},
		{in: "ünïcode ok", want: "ünïcode ok"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, sanitize(tt.in), "%q", tt.in)
	}
}

func FuzzSanitize(f *testing.F) {
	f.Add("row\nforged\x1b[0m\u202e")
	f.Fuzz(func(t *testing.T, s string) {
		out := sanitize(s)
		for _, r := range out {
			if unsafeRune(r) {
				t.Fatalf("sanitize(%q) = %q keeps %U", s, out, r)
			}
		}
		tb := &table{cols: []column{{header: "A", min: 3}, {header: "B", min: 3, cutEnd: true}}}
		tb.add(s, s)
		var b bytes.Buffer
		require.NoError(t, tb.write(&b, 40))
		if n := strings.Count(b.String(), "\n"); n != 2 {
			t.Fatalf("a cell made %d lines: %q", n, b.String())
		}
	})
}

func TestTableFitsWidth(t *testing.T) {
	tb := &table{cols: []column{{header: "POD", min: 5}, {header: "IMAGE", min: 10}, {header: "WHY", min: 10, cutEnd: true}}}
	tb.add("team-a/a-very-long-pod-name", "registry.example.com:5000/team-a/some/deep/repository:v1.2.3", strings.Repeat("reason ", 20))
	var b bytes.Buffer
	require.NoError(t, tb.write(&b, 60))
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		assert.LessOrEqual(t, len([]rune(l)), 60, l)
	}
	assert.Contains(t, b.String(), ":v1.2.3", "a cut image keeps its tag")
	b.Reset()
	require.NoError(t, tb.write(&b, 0))
	assert.Contains(t, b.String(), "registry.example.com:5000/team-a/some/deep/repository:v1.2.3", "wide cuts nothing")
}

func TestWrapText(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want []string
	}{
		{name: "fits", in: "credential match", n: 20, want: []string{"credential match"}},
		{name: "exactly", in: "credential match", n: 16, want: []string{"credential match"}},
		{name: "at spaces", in: "refused by the registry (no matching credentials)", n: 20,
			want: []string{"refused by the", "registry (no", "matching", "credentials)"}},
		{name: "a word longer than a line", in: "a 0123456789abcdef b", n: 8, want: []string{"a", "01234567", "89abcdef", "b"}},
		{name: "runes, not bytes", in: "ünïcödé wörds", n: 7, want: []string{"ünïcödé", "wörds"}},
		{name: "spaces collapse", in: "  two   spaces  ", n: 20, want: []string{"two spaces"}},
		{name: "empty", in: "", n: 5, want: []string{""}},
		{name: "width below one", in: "ab", n: 0, want: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, wrapText(tt.in, tt.n))
		})
	}
}

func TestTableTitlesAndWrappedCells(t *testing.T) {
	tb := &table{cols: []column{{header: "POD", min: 5}, {header: "WHY", min: 10, first: true, wrap: true}, {header: "OK"}}}
	tb.addTitle("1. a step whose title is longer than the table is wide")
	tb.add("team-a/app", "refused by the registry (no matching credentials)", "yes")
	var b bytes.Buffer
	require.NoError(t, tb.write(&b, 40))
	assert.Equal(t, "POD         WHY                      OK\n"+
		"1. a step whose title is longer than th…\n"+
		"team-a/app  refused by the registry  yes\n"+
		"            (no matching\n"+
		"            credentials)\n", b.String())
	b.Reset()
	require.NoError(t, tb.write(&b, 0))
	assert.Contains(t, b.String(), "1. a step whose title is longer than the table is wide\n", "wide cuts no title")
	assert.Contains(t, b.String(), "refused by the registry (no matching credentials)  yes", "wide wraps nothing")
}

func FuzzLoadAccess(f *testing.F) {
	f.Add("users:\n- {name: alice, password: fuzz-pw-123456}\nrepositories:\n- {name: team-a/*, readers: [alice]}\n")
	f.Add("users: [{name: alice, pasword: fuzz-pw-123456}]\n")
	f.Fuzz(func(t *testing.T, data string) {
		path := filepath.Join(t.TempDir(), "access.yaml")
		require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
		_, err := loadAccess(path)
		if err != nil && strings.Contains(data, "fuzz-pw-123456") {
			assert.NotContains(t, err.Error(), "fuzz-pw-123456", "an access file error quoted a password")
		}
	})
}
