package main_test

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertFits checks that every line of out is at most width runes.
func assertFits(t *testing.T, out string, width int) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(line), width, "a line is wider than %d columns: %q", width, line)
	}
}

// TestTablesFitTheWidth: the default tables fit COLUMNS, or 120 columns
// when it is unset and the output is not a terminal.
func TestTablesFitTheWidth(t *testing.T) {
	w := newWorld(t)
	manifest := w.manifest("tenants.yaml")
	tests := []struct {
		name     string
		args     []string
		columns  string
		width    int
		wantLine string // a text the width leaves whole
	}{
		{name: "demo", args: []string{"demo"}, width: 120, wantLine: "refused by the registry (no"},
		{name: "run", args: []string{"run", "-f", manifest}, width: 120},
		{name: "records", args: []string{"records"}, width: 120},
		{name: "run in 100 columns", args: []string{"run", "-f", manifest}, columns: "100", width: 100},
		{name: "run in 200 columns", args: []string{"run", "-f", manifest}, columns: "200", width: 200,
			wantLine: "refused by the registry (no matching credentials)"},
		{name: "demo in 200 columns", args: []string{"demo"}, columns: "200", width: 200,
			wantLine: "refused by the registry (no matching credentials)"},
		{name: "COLUMNS not a number", args: []string{"run", "-f", manifest}, columns: "wide", width: 120},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "state")
			if tt.args[0] == "records" {
				res := pullguard(t, "run", "-f", manifest, "--root-dir", root)
				require.Equal(t, 0, res.code, res.stderr)
			}
			res := pullguardEnv(t, []string{"COLUMNS=" + tt.columns}, nil, append(tt.args, "--root-dir", root)...)
			require.Equal(t, 0, res.code, res.stderr)
			assertFits(t, res.stdout, tt.width)
			assert.Contains(t, res.stdout, tt.wantLine)
		})
	}
}

// TestWideKeepsWholeMessages: -o wide cuts nothing; every event message
// of -o json is in it whole.
func TestWideKeepsWholeMessages(t *testing.T) {
	w := newWorld(t)
	manifest := w.manifest("tenants.yaml")
	run := func(format string) string {
		res := pullguard(t, "run", "-f", manifest, "--root-dir", filepath.Join(t.TempDir(), "state"), "-o", format)
		require.Equal(t, 0, res.code, res.stderr)
		return res.stdout
	}
	table, wide := normalize(run("table"), w.reg.Host()), normalize(run("wide"), w.reg.Host())
	doc := decodeRun(t, run("json"))
	require.NotEmpty(t, doc.Events)
	assert.Contains(t, table, "…", "the default table cuts the longest messages")
	assert.NotContains(t, wide, "…")
	for _, ev := range doc.Events {
		assert.Contains(t, wide, normalize(ev.Message, w.reg.Host()))
	}

	res := pullguard(t, "demo", "-o", "wide")
	require.Equal(t, 0, res.code, res.stderr)
	assert.NotContains(t, res.stdout, "…")
	for _, whole := range []string{"UNAUTHORIZED: authentication required", "including waiting). Image size:", "refused by the registry (no matching credentials)"} {
		assert.Contains(t, res.stdout, whole)
	}
	res = pullguard(t, "demo", "-o", "json")
	assert.NotEqual(t, 0, res.code)
	assert.Contains(t, res.stderr, "--output must be table or wide")
}
