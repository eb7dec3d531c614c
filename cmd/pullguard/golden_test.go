package main_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

var (
	reDigest   = regexp.MustCompile(`sha256:[0-9a-f]{64}`)
	reShortRef = regexp.MustCompile(`sha256:[0-9a-f]{12}`)
	reHash     = regexp.MustCompile(`hash [0-9a-f]{12}`)
	reTime     = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	rePulledIn = regexp.MustCompile(`(Successfully pulled image \S+) in [^"\n]*`)
	// A registry address cut in the middle by a fitted table keeps the
	// first digit of its port.
	reCutHost = regexp.MustCompile(`127\.0\.0\.1:\d*…`)
)

// normalize replaces what differs between runs: the registry's address,
// digests, times, durations and the host name.
func normalize(s, regHost string) string {
	s = strings.ReplaceAll(s, regHost, "REGISTRY:PORT")
	s = reCutHost.ReplaceAllString(s, "127.0.0.1:P…")
	if h, err := os.Hostname(); err == nil && h != "" {
		s = strings.ReplaceAll(s, `"`+h+`"`, `"HOST"`)
		s = strings.ReplaceAll(s, "host: "+h, "host: HOST")
	}
	s = reDigest.ReplaceAllString(s, "sha256:"+strings.Repeat("d", 64))
	s = reShortRef.ReplaceAllString(s, "sha256:dddddddddddd")
	s = reHash.ReplaceAllString(s, "hash hhhhhhhhhhhh")
	s = reTime.ReplaceAllStringFunc(s, func(m string) string { return "TIME" + strings.Repeat(" ", len(m)-4) })
	return rePulledIn.ReplaceAllString(s, "$1 in DURATION")
}

// normalizeDoc normalizes a JSON or YAML document value by value, so that
// a duration's length never moves a line break.
func normalizeDoc(t *testing.T, out, regHost string, asYAML bool) string {
	t.Helper()
	var doc any
	if asYAML {
		require.NoError(t, yaml.Unmarshal([]byte(out), &doc), out)
	} else {
		require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
				if k == "hash" {
					x[k] = "hhhhhhhhhhhh" // a keyed hash: the key is the node's own
				}
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		case string:
			if h, err := os.Hostname(); err == nil && x == h {
				return "HOST"
			}
			return strings.TrimRight(normalize(x, regHost), " ")
		}
		return v
	}
	doc = walk(doc)
	if asYAML {
		data, err := yaml.Marshal(doc)
		require.NoError(t, err)
		return string(data)
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	require.NoError(t, err)
	return string(data) + "\n"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/pullguard -run Golden -update to create it")
	assert.Equal(t, string(want), got, "golden file %s (go test ./cmd/pullguard -run Golden -update rewrites it)", path)
}

func TestRunOutputGolden(t *testing.T) {
	tests := []struct {
		format string
		file   string
	}{
		{format: "table", file: "run.table"},
		{format: "wide", file: "run.wide"},
		{format: "json", file: "run.json"},
		{format: "yaml", file: "run.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			w := newWorld(t)
			res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", filepath.Join(w.dir, "state"), "-o", tt.format)
			require.Equal(t, 0, res.code, res.stderr)
			var got string
			switch tt.format {
			case "json", "yaml":
				got = normalizeDoc(t, res.stdout, w.reg.Host(), tt.format == "yaml")
			default:
				got = normalize(res.stdout, w.reg.Host())
			}
			golden(t, tt.file, got)
			if tt.format == "table" {
				for _, line := range strings.Split(res.stdout, "\n") {
					assert.LessOrEqual(t, utf8.RuneCountInString(line), 120, "the default table fits 120 columns: %q", line)
				}
			}
		})
	}
}

func TestRecordsOutputGolden(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root)
	require.Equal(t, 0, res.code, res.stderr)
	for _, format := range []string{"table", "wide", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			res := pullguard(t, "records", "--root-dir", root, "-o", format)
			require.Equal(t, 0, res.code, res.stderr)
			var got string
			switch format {
			case "json", "yaml":
				got = normalizeDoc(t, res.stdout, w.reg.Host(), format == "yaml")
			default:
				got = normalize(res.stdout, w.reg.Host())
			}
			golden(t, "records."+format, got)
		})
	}
}
