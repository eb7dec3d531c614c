package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// row returns the cells of the first table row for n records after the
// heading that starts with heading.
func row(t *testing.T, text, heading, n string) []string {
	t.Helper()
	_, after, ok := strings.Cut(text, heading)
	require.True(t, ok, "no table %q", heading)
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "| "+n+" |") {
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			return cells
		}
	}
	t.Fatalf("no row for %s records under %q", n, heading)
	return nil
}

// TestRunSmall runs the whole benchmark on small stores, one of them above
// the kubelet's 550-record cache and above the hot set, so every path runs:
// the answers are checked inside run, the tables must be complete.
func TestRunSmall(t *testing.T) {
	var out bytes.Buffer
	cfg := config{sizes: []int{100, 1100}, rounds: 2, decideTime: 5 * time.Millisecond, writeTime: time.Millisecond, minWrites: 2, dir: t.TempDir(), fastDir: t.TempDir()}
	require.NoError(t, run(context.Background(), cfg, &out, io.Discard))
	text := out.String()

	big := row(t, text, "### Decisions", "1 100")
	require.Len(t, big, 7)
	for i, c := range big {
		assert.NotEqual(t, "–", c, "column %d for 1 100 records", i)
	}
	assert.True(t, strings.HasSuffix(big[5], "×") && strings.HasSuffix(big[6], "×"), "ratios: %q", big[5:])
	small := row(t, text, "### Decisions", "100")
	for _, i := range []int{3, 4, 6} {
		assert.Equal(t, "–", small[i], "no hot set at 100 records, column %d", i)
	}
	assert.NotEqual(t, "–", small[1])

	for _, heading := range []string{"### Writes", "### Start-up", "### Memory and disk"} {
		for _, n := range []string{"100", "1 100"} {
			for i, c := range row(t, text, heading, n) {
				assert.NotEqual(t, "–", c, "%s, %s records, column %d", heading, n, i)
			}
		}
	}
}

// TestCheckRefusalsCatchesUnreadRecords: a record the kubelet cannot find
// makes its image look preloaded, so "no pull needed" would be measured
// without any credential check; the run must stop instead.
func TestCheckRefusalsCatchesUnreadRecords(t *testing.T) {
	ctx := context.Background()
	const n = 20
	up, err := newUpstream(filepath.Join(t.TempDir(), "kubelet"), n)
	require.NoError(t, err)
	pg, err := newPullguard(ctx, t.TempDir(), filepath.Join(t.TempDir(), "pullguard"), n)
	require.NoError(t, err)
	require.NoError(t, pg.reset())
	require.NoError(t, pg.open(ctx))
	t.Cleanup(func() { _ = pg.close() })
	s := &subject{n: n, up: up, pg: pg}
	rng := rand.New(rand.NewPCG(1, 2))

	require.NoError(t, up.open(ctx))
	require.NoError(t, checkRefusals(ctx, s, rng), "every record in place")

	require.NoError(t, os.Remove(filepath.Join(up.root, "image_manager", "pulled", upstreamFileName(imageRef(n-1)))))
	require.NoError(t, up.open(ctx))
	err = checkRefusals(ctx, s, rng)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the kubelet's pull manager lets another tenant's pod use image 19")
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "100,1000, 10000", want: []int{100, 1000, 10000}},
		{in: "5", want: []int{5}},
		{in: "0", wantErr: true},
		{in: "-3", wantErr: true},
		{in: "1e3", wantErr: true},
		{in: "100,", wantErr: true},
		{in: "20000000", wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSizes(tc.in)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		ns   float64
		want string
	}{
		{ns: 87.4, want: "87 ns"},
		{ns: 1_904, want: "1.90 µs"},
		{ns: 18_640, want: "18.6 µs"},
		{ns: 352_000, want: "352 µs"},
		{ns: 2_120_000, want: "2.12 ms"},
		{ns: 168_400_000, want: "168 ms"},
		{ns: 3_456_000_000, want: "3.46 s"},
	} {
		assert.Equal(t, tc.want, duration(tc.ns))
	}
	for _, tc := range []struct {
		b    float64
		want string
	}{{906, "906 B"}, {9_999, "9999 B"}, {12_345, "12 KB"}, {2_345_678, "2.3 MB"}, {90_600_000, "91 MB"}} {
		assert.Equal(t, tc.want, size(tc.b))
	}
	for _, tc := range []struct {
		n    int
		want string
	}{{100, "100"}, {1024, "1 024"}, {100000, "100 000"}, {1234567, "1 234 567"}} {
		assert.Equal(t, tc.want, count(tc.n))
	}
	s := samples{5, 1, 3, 2}
	assert.InDelta(t, 2.5, s.median(), 1e-9)
	lo, hi := s.span()
	assert.Equal(t, []float64{1, 5}, []float64{lo, hi})
}
