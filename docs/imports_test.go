package docs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repository is the main module's path. The repository's packages, those
// of its modules of their own included, are named in docs/imports.txt by
// their directory below it.
const repository = "github.com/pullguard/pullguard"

// TestImports holds the repository to docs/imports.txt: every package's
// arrows into the repository are exactly the file's, every package its
// build reaches (go list -deps: through the repository's packages and
// through third-party ones) obeys the never rules, and docs/architecture.md's
// Packages table draws the same graph.
func TestImports(t *testing.T) {
	text, err := os.ReadFile("imports.txt")
	require.NoError(t, err)
	r, err := parseRules(string(text))
	require.NoError(t, err)
	g := loadGraph(t, "..")
	require.Contains(t, g.own, repository+"/pkg/criruntime")
	require.Contains(t, g.own, repository+"/test/kubelet", "the modules of their own are read")
	require.NotEmpty(t, g.route(repository+"/cmd/pullguard", "go.etcd.io/bbolt"), "the graph follows imports through the repository's packages")
	require.NotEmpty(t, g.route(g.tests[repository+"/pkg/keyring"], "github.com/stretchr/testify"), "the graph holds the tests' builds")

	t.Run("code", func(t *testing.T) {
		errs := check(r, g)
		assert.Empty(t, errs, "\n"+strings.Join(errs, "\n"))
	})
	t.Run("architecture.md", func(t *testing.T) {
		doc, err := os.ReadFile("architecture.md")
		require.NoError(t, err)
		errs := checkTable(r, string(doc))
		assert.Empty(t, errs, "\n"+strings.Join(errs, "\n"))
	})
}

// loadGraph lists the main module under root with go list (every
// package's build and test binary, with every package they reach) and
// reads the imports of the modules of their own beside it from their
// files: they require k8s.io/kubernetes, which listing would download.
func loadGraph(t *testing.T, root string) graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test", "-json=ImportPath,Imports,ForTest,Module", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	g := graph{imports: map[string][]string{}, tests: map[string]string{}, modules: map[string]bool{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			ForTest    string
			Module     *struct{ Main bool }
		}
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		g.imports[p.ImportPath] = p.Imports
		if p.Module == nil || !p.Module.Main || p.ForTest != "" {
			continue
		}
		if pkg, ok := strings.CutSuffix(p.ImportPath, ".test"); ok {
			g.tests[pkg] = p.ImportPath
		} else {
			g.own = append(g.own, p.ImportPath)
		}
	}

	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	fset := token.NewFileSet()
	err = filepath.WalkDir(abs, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); dir != abs && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(abs, dir)
		if err != nil {
			return err
		}
		inOwnModule := false
		for mod := filepath.ToSlash(rel); mod != "."; mod = filepath.ToSlash(filepath.Dir(mod)) {
			if _, err := os.Stat(filepath.Join(abs, mod, "go.mod")); err == nil {
				inOwnModule = true
				break
			}
		}
		if !inOwnModule {
			return nil
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			return err
		}
		path := repository + "/" + filepath.ToSlash(rel)
		var imports []string
		for _, f := range files {
			file, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, spec := range file.Imports {
				imports = append(imports, strings.Trim(spec.Path.Value, `"`))
			}
		}
		slices.Sort(imports)
		g.imports[path] = slices.Compact(imports)
		g.own = append(g.own, path)
		g.modules[path] = true
		return nil
	})
	require.NoError(t, err)
	return g
}
