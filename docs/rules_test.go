package docs_test

import (
	"bufio"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// rules is docs/imports.txt.
type rules struct {
	order    []string            // every package, bottom of the graph first
	imports  map[string][]string // the repository's packages each imports
	only     map[string][]string // the only other prefixes a package's own files import
	never    map[string][]string // the prefixes a package's build never reaches
	neverAll []string            // the prefixes no build of the main module reaches
	testOnly map[string]bool
}

// parseRules reads docs/imports.txt (its grammar is at its top).
func parseRules(text string) (*rules, error) {
	r := &rules{imports: map[string][]string{}, only: map[string][]string{}, never: map[string][]string{}, testOnly: map[string]bool{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		head, tail, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: %q has no colon", n, line)
		}
		subject, list := strings.Fields(head), strings.Fields(tail)
		if err := r.add(subject, list); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for pkg := range r.testOnly {
		if _, ok := r.imports[pkg]; !ok {
			return nil, fmt.Errorf("test-only package %s has no line", pkg)
		}
	}
	for _, pkg := range r.order {
		for _, imp := range r.imports[pkg] {
			if r.testOnly[imp] && !r.testOnly[pkg] {
				return nil, fmt.Errorf("%s imports %s, which is for tests only", pkg, imp)
			}
		}
	}
	return r, nil
}

func (r *rules) add(subject, list []string) error {
	switch {
	case len(subject) == 1 && subject[0] == "never":
		r.neverAll = append(r.neverAll, list...)
	case len(subject) == 1 && subject[0] == "testonly":
		for _, pkg := range list {
			r.testOnly[pkg] = true
		}
	case len(subject) == 1:
		pkg := subject[0]
		if _, dup := r.imports[pkg]; dup {
			return fmt.Errorf("%s has a second line", pkg)
		}
		for _, imp := range list {
			if _, ok := r.imports[imp]; !ok {
				return fmt.Errorf("%s imports %s, which has no line above it (imports point down the file)", pkg, imp)
			}
		}
		r.order = append(r.order, pkg)
		r.imports[pkg] = list
	case len(subject) == 2 && (subject[1] == "only" || subject[1] == "never"):
		pkg := subject[0]
		if _, ok := r.imports[pkg]; !ok {
			return fmt.Errorf("%s's %s rule comes before its line", pkg, subject[1])
		}
		if len(list) == 0 {
			return fmt.Errorf("%s's %s rule names nothing", pkg, subject[1])
		}
		if subject[1] == "only" {
			r.only[pkg] = append(r.only[pkg], list...)
		} else {
			r.never[pkg] = append(r.never[pkg], list...)
		}
	default:
		return fmt.Errorf("%q is neither a package, a package's only or never rule, never nor testonly", strings.Join(subject, " "))
	}
	return nil
}

// graph is what the toolchain says about the repository's packages.
type graph struct {
	imports map[string][]string // every package: its imports (a test binary's variants are named "P [P.test]")
	own     []string            // the repository's packages
	tests   map[string]string   // a package of the main module -> its test binary
	modules map[string]bool     // the packages in modules of their own: their files' imports, nothing further
}

// route returns the shortest chain of imports from the package from to a
// package under prefix, or nil if from reaches none.
func (g graph) route(from, prefix string) []string {
	parent := map[string]string{from: ""}
	for queue := []string{from}; len(queue) > 0; queue = queue[1:] {
		p := queue[0]
		if under(p, prefix) {
			var chain []string
			for ; p != ""; p = parent[p] {
				chain = append(chain, displayed(p))
			}
			slices.Reverse(chain)
			return chain
		}
		for _, imp := range g.imports[p] {
			if _, seen := parent[imp]; !seen {
				parent[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// under reports whether the package path (a test binary's variant of it
// too) is prefix or below it; "std" covers the standard library.
func under(path, prefix string) bool {
	path, _, _ = strings.Cut(path, " [")
	if prefix == "std" {
		first, _, _ := strings.Cut(path, "/")
		return !strings.Contains(first, ".")
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

func underAny(path string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return under(path, p) })
}

// displayed names a package as docs/imports.txt does.
func displayed(path string) string {
	path, _, _ = strings.Cut(path, " [")
	return strings.TrimPrefix(path, repository+"/")
}

// check returns every way g breaks r, sorted by package.
func check(r *rules, g graph) []string {
	var errs []string
	own := slices.Sorted(slices.Values(g.own))
	listed := map[string]bool{}
	for _, path := range own {
		pkg := displayed(path)
		listed[pkg] = true
		want, ok := r.imports[pkg]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s has no line in docs/imports.txt", pkg))
			continue
		}
		var got []string
		for _, imp := range g.imports[path] {
			switch {
			case under(imp, repository):
				got = append(got, displayed(imp))
			case r.only[pkg] != nil && !underAny(imp, r.only[pkg]):
				errs = append(errs, fmt.Sprintf("%s imports %s, which its only rule in docs/imports.txt does not allow", pkg, imp))
			}
		}
		for _, imp := range got {
			if !slices.Contains(want, imp) {
				errs = append(errs, fmt.Sprintf("%s imports %s, an arrow docs/imports.txt does not have", pkg, imp))
			}
		}
		for _, imp := range want {
			if !slices.Contains(got, imp) {
				errs = append(errs, fmt.Sprintf("docs/imports.txt has the arrow %s → %s, but %s does not import %s", pkg, imp, pkg, imp))
			}
		}
		if g.modules[path] {
			continue
		}
		for _, prefix := range r.never[pkg] {
			if chain := g.route(path, prefix); chain != nil {
				errs = append(errs, fmt.Sprintf("%s reaches %s, which docs/imports.txt forbids it: %s", pkg, prefix, strings.Join(chain, " → ")))
			}
		}
		for _, prefix := range r.neverAll {
			if chain := g.route(path, prefix); chain != nil {
				errs = append(errs, fmt.Sprintf("%s reaches %s, which docs/imports.txt forbids: %s", pkg, prefix, strings.Join(chain, " → ")))
			} else if test := g.tests[path]; test != "" && g.route(test, prefix) != nil {
				chain := g.route(test, prefix)
				errs = append(errs, fmt.Sprintf("%s's tests reach %s, which docs/imports.txt forbids: %s", pkg, prefix, strings.Join(chain, " → ")))
			}
		}
	}
	for _, pkg := range r.order {
		if !listed[pkg] {
			errs = append(errs, fmt.Sprintf("docs/imports.txt has a line for %s, which is no package of the repository", pkg))
		}
	}
	return errs
}

// The Packages table of docs/architecture.md: its columns that docs/imports.txt
// holds.
const (
	tableSection = "## Packages"
	colPackage   = "package"
	colImports   = "imports of the repository"
	colOther     = "other imports"
)

var codeSpan = regexp.MustCompile("`([^`]+)`")

// checkTable returns every way the Packages table of the Markdown document
// doc differs from r: a row per package in the file's order, each naming
// exactly its arrows in its imports column (as code spans), each prefix of
// its only and never rules as a code span in its other imports column
// ("std": the words "standard library"), "tests only" in a test-only
// package's row, and every prefix of the never rules for all in the
// section.
func checkTable(r *rules, doc string) []string {
	_, section, ok := strings.Cut(doc, "\n"+tableSection+"\n")
	if !ok {
		return []string{"docs/architecture.md has no " + tableSection + " section"}
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var table [][]string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "|") {
			table = append(table, cells(line))
		} else if table != nil {
			break
		}
	}
	if len(table) < 2 {
		return []string{"the " + tableSection + " section has no table"}
	}
	col := map[string]int{}
	for i, h := range table[0] {
		col[h] = i
	}
	var errs []string
	for _, h := range []string{colPackage, colImports, colOther} {
		if _, ok := col[h]; !ok {
			errs = append(errs, fmt.Sprintf("the Packages table has no %q column", h))
		}
	}
	if errs != nil {
		return errs
	}

	var rows []string
	for _, row := range table[2:] {
		if len(row) != len(table[0]) {
			errs = append(errs, fmt.Sprintf("the Packages table's row %q has %d cells, its header %d", strings.Join(row, " | "), len(row), len(table[0])))
			continue
		}
		names := spans(row[col[colPackage]])
		if len(names) != 1 {
			errs = append(errs, fmt.Sprintf("the Packages table's row %q names %d packages in its %s column, not one", row[col[colPackage]], len(names), colPackage))
			continue
		}
		pkg := names[0]
		rows = append(rows, pkg)
		want, ok := r.imports[pkg]
		if !ok {
			errs = append(errs, fmt.Sprintf("the Packages table has a row for %s, which has no line in docs/imports.txt", pkg))
			continue
		}
		got := spans(row[col[colImports]])
		for _, imp := range got {
			if !slices.Contains(want, imp) {
				errs = append(errs, fmt.Sprintf("the Packages table's row for %s names %s among its imports, docs/imports.txt does not", pkg, imp))
			}
		}
		for _, imp := range want {
			if !slices.Contains(got, imp) {
				errs = append(errs, fmt.Sprintf("the Packages table's row for %s does not name %s among its imports, docs/imports.txt does", pkg, imp))
			}
		}
		other := row[col[colOther]]
		for _, prefix := range slices.Concat(r.only[pkg], r.never[pkg]) {
			if prefix == "std" && !strings.Contains(other, "standard library") || prefix != "std" && !slices.Contains(spans(other), prefix) {
				errs = append(errs, fmt.Sprintf("the Packages table's row for %s does not name %s (a rule of docs/imports.txt) in its %s column", pkg, prefix, colOther))
			}
		}
		if r.testOnly[pkg] && !strings.Contains(strings.Join(row, "|"), "tests only") {
			errs = append(errs, fmt.Sprintf("the Packages table's row for %s does not say it is for tests only", pkg))
		}
	}
	for _, pkg := range r.order {
		if !slices.Contains(rows, pkg) {
			errs = append(errs, fmt.Sprintf("the Packages table has no row for %s", pkg))
		}
	}
	if errs == nil && !slices.Equal(rows, r.order) {
		for i := range rows {
			if rows[i] != r.order[i] {
				errs = append(errs, fmt.Sprintf("the Packages table's row %d is %s, docs/imports.txt's package %d is %s: the rows run in the file's order", i+1, rows[i], i+1, r.order[i]))
				break
			}
		}
	}
	for _, prefix := range r.neverAll {
		if !slices.Contains(spans(section), prefix) {
			errs = append(errs, fmt.Sprintf("the %s section does not name %s, which no build of the module may reach", tableSection, prefix))
		}
	}
	return errs
}

// cells splits a Markdown table row at the pipes outside code spans.
func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var out []string
	var cell strings.Builder
	inCode := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '`':
			inCode = !inCode
		case c == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteByte('\\')
			i++
		case c == '|' && !inCode:
			out = append(out, strings.TrimSpace(cell.String()))
			cell.Reset()
			continue
		}
		cell.WriteByte(line[i])
	}
	return append(out, strings.TrimSpace(cell.String()))
}

// spans returns the code spans of Markdown text.
func spans(text string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}
