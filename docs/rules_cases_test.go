package docs_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRules is a small docs/imports.txt for the cases below.
const fakeRules = `
never: k8s.io/kubernetes
internal/leak:
internal/leak only: std
credtracker:
pkg/criruntime: internal/leak
pkg/keyring:
pkg/keyring never: go.etcd.io/bbolt
cmd/pullguard: pkg/criruntime credtracker pkg/keyring
testonly: internal/pulltest
internal/pulltest: credtracker
test/kubelet: pkg/keyring
`

// fakeGraph builds a graph from every package's imports, "~" standing for
// the repository's path ("~/pkg/keyring"). A package "P.test" is P's test
// binary; modules names the packages in modules of their own.
func fakeGraph(imports map[string][]string, modules ...string) graph {
	expand := func(s string) string { return strings.ReplaceAll(s, "~", repository) }
	g := graph{imports: map[string][]string{}, tests: map[string]string{}, modules: map[string]bool{}}
	for p, imps := range imports {
		if imps == nil {
			continue // the case removed the package
		}
		p = expand(p)
		for _, imp := range imps {
			g.imports[p] = append(g.imports[p], expand(imp))
		}
		if p == repository || !strings.HasPrefix(p, repository+"/") || strings.Contains(p, " [") || strings.HasSuffix(p, "_test") {
			continue
		}
		if pkg, ok := strings.CutSuffix(p, ".test"); ok {
			g.tests[pkg] = p
		} else {
			g.own = append(g.own, p)
		}
	}
	for _, m := range modules {
		g.modules[expand(m)] = true
	}
	return g
}

// TestCheck: check finds every arrow that fakeRules does not draw, every
// arrow it draws that the code lacks, and every never and only rule
// broken, however far down the graph (a fake package graph each).
func TestCheck(t *testing.T) {
	clean := map[string][]string{
		"~/internal/leak":                         {"strings"},
		"~/credtracker":                           {"go.etcd.io/bbolt"},
		"go.etcd.io/bbolt":                        {"os"},
		"~/pkg/criruntime":                        {"~/internal/leak", "google.golang.org/grpc"},
		"google.golang.org/grpc":                  {"net"},
		"~/pkg/keyring":                           {"encoding/json"},
		"~/cmd/pullguard":                         {"~/pkg/criruntime", "~/credtracker", "~/pkg/keyring"},
		"~/internal/pulltest":                     {"~/credtracker", "testing"},
		"~/pkg/keyring.test":                      {"~/pkg/keyring_test [~/pkg/keyring.test]", "testing"},
		"~/pkg/keyring_test [~/pkg/keyring.test]": {"~/pkg/keyring", "~/internal/pulltest", "~/pkg/criruntime"},
		"~/test/kubelet":                          {"~/pkg/keyring", "k8s.io/kubernetes/pkg/kubelet"},
	}
	for _, tt := range []struct {
		name    string
		rules   func(string) string // edits fakeRules
		changed map[string][]string // packages whose imports replace clean's (nil removes one)
		want    []string
	}{
		{
			name: "the graph as the file draws it: a module of its own may require k8s.io/kubernetes, tests may import any package",
		},
		{
			name:    "an arrow up the graph",
			changed: map[string][]string{"~/pkg/criruntime": {"~/internal/leak", "~/credtracker"}},
			want:    []string{"pkg/criruntime imports credtracker, an arrow docs/imports.txt does not have"},
		},
		{
			name:    "an arrow the code no longer has",
			changed: map[string][]string{"~/pkg/criruntime": {"google.golang.org/grpc"}},
			want:    []string{"docs/imports.txt has the arrow pkg/criruntime → internal/leak, but pkg/criruntime does not import internal/leak"},
		},
		{
			name:    "two steps down: pkg/criruntime reaches credtracker through internal/leak",
			changed: map[string][]string{"~/internal/leak": {"strings", "~/credtracker"}},
			want:    []string{"internal/leak imports credtracker, an arrow docs/imports.txt does not have"},
		},
		{
			name:    "a module of its own adds an arrow",
			changed: map[string][]string{"~/test/kubelet": {"~/pkg/keyring", "~/credtracker", "k8s.io/kubernetes/pkg/kubelet"}},
			want:    []string{"test/kubelet imports credtracker, an arrow docs/imports.txt does not have"},
		},
		{
			name:    "a leaf imports a library outside its only rule",
			changed: map[string][]string{"~/internal/leak": {"strings", "github.com/sirupsen/logrus"}},
			want:    []string{"internal/leak imports github.com/sirupsen/logrus, which its only rule in docs/imports.txt does not allow"},
		},
		{
			name:    "a never rule broken through a library",
			changed: map[string][]string{"~/pkg/keyring": {"encoding/json", "example.com/kv"}, "example.com/kv": {"go.etcd.io/bbolt/errors"}},
			want:    []string{"pkg/keyring reaches go.etcd.io/bbolt, which docs/imports.txt forbids it: pkg/keyring → example.com/kv → go.etcd.io/bbolt/errors"},
		},
		{
			name:    "a never rule broken through an arrow the file has",
			rules:   func(s string) string { return strings.Replace(s, "pkg/keyring:\n", "pkg/keyring: credtracker\n", 1) },
			changed: map[string][]string{"~/pkg/keyring": {"~/credtracker"}},
			want:    []string{"pkg/keyring reaches go.etcd.io/bbolt, which docs/imports.txt forbids it: pkg/keyring → credtracker → go.etcd.io/bbolt"},
		},
		{
			name:    "the product reaches k8s.io/kubernetes through a library",
			changed: map[string][]string{"google.golang.org/grpc": {"net", "k8s.io/kubernetes/pkg/util/x"}},
			want: []string{
				"cmd/pullguard reaches k8s.io/kubernetes, which docs/imports.txt forbids: cmd/pullguard → pkg/criruntime → google.golang.org/grpc → k8s.io/kubernetes/pkg/util/x",
				"pkg/criruntime reaches k8s.io/kubernetes, which docs/imports.txt forbids: pkg/criruntime → google.golang.org/grpc → k8s.io/kubernetes/pkg/util/x",
				"pkg/keyring's tests reach k8s.io/kubernetes, which docs/imports.txt forbids: pkg/keyring.test → pkg/keyring_test → pkg/criruntime → google.golang.org/grpc → k8s.io/kubernetes/pkg/util/x",
			},
		},
		{
			name: "only a test reaches k8s.io/kubernetes",
			changed: map[string][]string{
				"~/pkg/keyring_test [~/pkg/keyring.test]": {"~/pkg/keyring", "k8s.io/kubernetes/pkg/credentialprovider"},
			},
			want: []string{"pkg/keyring's tests reach k8s.io/kubernetes, which docs/imports.txt forbids: pkg/keyring.test → pkg/keyring_test → k8s.io/kubernetes/pkg/credentialprovider"},
		},
		{
			name:    "a package with no line",
			changed: map[string][]string{"~/pkg/newthing": {"strings"}},
			want:    []string{"pkg/newthing has no line in docs/imports.txt"},
		},
		{
			name:  "a line with no package",
			rules: func(s string) string { return s + "pkg/gone:\n" },
			want:  []string{"docs/imports.txt has a line for pkg/gone, which is no package of the repository"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			text := fakeRules
			if tt.rules != nil {
				text = tt.rules(text)
			}
			r, err := parseRules(text)
			require.NoError(t, err)
			imports := map[string][]string{}
			for p, imps := range clean {
				imports[p] = imps
			}
			for p, imps := range tt.changed {
				imports[p] = imps
			}
			assert.Equal(t, tt.want, check(r, fakeGraph(imports, "~/test/kubelet")))
		})
	}
}

// TestParseRules: docs/imports.txt itself cannot draw an arrow up the
// graph, let the product import a test-only package, or say a thing twice.
func TestParseRules(t *testing.T) {
	for _, tt := range []struct {
		name    string
		text    string
		wantErr string
	}{
		{name: "the fake rules", text: fakeRules},
		{name: "test-only packages import each other", text: "testonly: t u\nt:\nu: t\n"},
		{name: "an arrow up the file", text: "a:\nb: c\nc:\n", wantErr: "line 2: b imports c, which has no line above it"},
		{name: "a package importing itself", text: "a: a\n", wantErr: "line 1: a imports a, which has no line above it"},
		{name: "a second line", text: "a:\na:\n", wantErr: "line 2: a has a second line"},
		{name: "a rule before its package", text: "a only: std\na:\n", wantErr: "line 1: a's only rule comes before its line"},
		{name: "a rule naming nothing", text: "a:\na never:\n", wantErr: "line 2: a's never rule names nothing"},
		{name: "the product imports a test-only package", text: "testonly: t\nt:\na: t\n", wantErr: "a imports t, which is for tests only"},
		{name: "a test-only package with no line", text: "testonly: t\n", wantErr: "test-only package t has no line"},
		{name: "no colon", text: "a b\n", wantErr: "line 1: \"a b\" has no colon"},
		{name: "an unknown rule", text: "a:\na sometimes: b\n", wantErr: "line 2: \"a sometimes\" is neither"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseRules(tt.text)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.NotEmpty(t, r.order)
		})
	}
}

// fakeDoc's Packages table draws fakeTableRules.
const (
	fakeTableRules = `
never: k8s.io/kubernetes
internal/leak:
internal/leak only: std
pkg/keyring: internal/leak
pkg/keyring never: go.etcd.io/bbolt
testonly: internal/pulltest
internal/pulltest: pkg/keyring
`
	fakeDoc = "# Architecture\n\n## Packages\n\nNo build reaches `k8s.io/kubernetes`.\n\n" +
		"| package | holds | imports of the repository | other imports |\n" +
		"|---|---|---|---|\n" +
		"| `internal/leak` | secrets in text | none | only the standard library |\n" +
		"| `pkg/keyring` | keyrings | `internal/leak` | never `go.etcd.io/bbolt` |\n" +
		"| `internal/pulltest` | for tests only: pull cases | `pkg/keyring` | testify |\n" +
		"\n## Next\n\n| package | holds | imports of the repository | other imports |\n|---|---|---|---|\n| `pkg/other` | x | y | z |\n"
)

// TestCheckTable: checkTable finds every way a Packages table can drift
// from docs/imports.txt.
func TestCheckTable(t *testing.T) {
	leakRow := "| `internal/leak` | secrets in text | none | only the standard library |\n"
	keyringRow := "| `pkg/keyring` | keyrings | `internal/leak` | never `go.etcd.io/bbolt` |\n"
	for _, tt := range []struct {
		name     string
		old, new string // fakeDoc with old replaced by new
		want     []string
	}{
		{name: "the table as the file draws it"},
		{
			name: "a pipe in a code span is no column",
			old:  "secrets in text", new: "secrets in `a|b` text",
		},
		{
			name: "a row names an arrow the file does not have",
			old:  "| `internal/leak` | never", new: "| `internal/leak`, `internal/pulltest` | never",
			want: []string{"the Packages table's row for pkg/keyring names internal/pulltest among its imports, docs/imports.txt does not"},
		},
		{
			name: "a row misses an arrow",
			old:  "| `internal/leak` | never", new: "| none | never",
			want: []string{"the Packages table's row for pkg/keyring does not name internal/leak among its imports, docs/imports.txt does"},
		},
		{
			name: "a package with no row",
			old:  "| `internal/pulltest` | for tests only: pull cases | `pkg/keyring` | testify |\n", new: "",
			want: []string{"the Packages table has no row for internal/pulltest"},
		},
		{
			name: "a row with no line",
			old:  keyringRow, new: keyringRow + "| `pkg/extra` | more | none | none |\n",
			want: []string{"the Packages table has a row for pkg/extra, which has no line in docs/imports.txt"},
		},
		{
			name: "rows out of the file's order",
			old:  leakRow + keyringRow, new: keyringRow + leakRow,
			want: []string{"the Packages table's row 1 is pkg/keyring, docs/imports.txt's package 1 is internal/leak: the rows run in the file's order"},
		},
		{
			name: "a never rule missing from its row",
			old:  "never `go.etcd.io/bbolt`", new: "no store",
			want: []string{"the Packages table's row for pkg/keyring does not name go.etcd.io/bbolt (a rule of docs/imports.txt) in its other imports column"},
		},
		{
			name: "an only rule missing from its row",
			old:  "only the standard library", new: "whatever it likes",
			want: []string{"the Packages table's row for internal/leak does not name std (a rule of docs/imports.txt) in its other imports column"},
		},
		{
			name: "a test-only package not said to be",
			old:  "for tests only: pull cases", new: "pull cases",
			want: []string{"the Packages table's row for internal/pulltest does not say it is for tests only"},
		},
		{
			name: "the rule for every build not stated",
			old:  "No build reaches `k8s.io/kubernetes`.", new: "",
			want: []string{"the ## Packages section does not name k8s.io/kubernetes, which no build of the module may reach"},
		},
		{
			name: "a row with a cell too many",
			old:  "| testify |", new: "| testify | more |",
			want: []string{"the Packages table's row \"`internal/pulltest` | for tests only: pull cases | `pkg/keyring` | testify | more\" has 5 cells, its header 4", "the Packages table has no row for internal/pulltest"},
		},
		{
			name: "a column renamed",
			old:  "| imports of the repository |", new: "| depends on |",
			want: []string{"the Packages table has no \"imports of the repository\" column"},
		},
		{
			name: "no Packages section",
			old:  "## Packages", new: "## Layout",
			want: []string{"docs/architecture.md has no ## Packages section"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseRules(fakeTableRules)
			require.NoError(t, err)
			doc := fakeDoc
			if tt.old != "" {
				require.Contains(t, doc, tt.old)
				doc = strings.Replace(doc, tt.old, tt.new, 1)
			}
			assert.Equal(t, tt.want, checkTable(r, doc))
		})
	}
}
