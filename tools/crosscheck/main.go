package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/tools/go/packages"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run type-checks the patterns in args for each -goos and returns the
// exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("crosscheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("C", ".", "the module's directory")
	systems := fs.String("goos", "darwin", "comma-separated operating systems to type-check for")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	patterns := fs.Args()
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	status := 0
	for _, goos := range strings.Split(*systems, ",") {
		n, err := check(*dir, goos, patterns, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "crosscheck: GOOS=%s: %v\n", goos, err)
			return 2
		}
		fmt.Fprintf(stdout, "crosscheck: GOOS=%s: %d packages type-checked with their dependencies, %d errors\n", goos, n.packages, n.errors)
		if n.errors > 0 {
			status = 1
		}
	}
	return status
}

type counts struct{ packages, errors int }

// check loads patterns in dir for goos, every dependency parsed and
// type-checked from source (no export data, so nothing is compiled), and
// prints each error of any package in the graph.
func check(dir, goos string, patterns []string, stderr io.Writer) (counts, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedImports | packages.NeedDeps |
			packages.NeedSyntax | packages.NeedTypes,
		Dir: dir,
		// CGO off: a cross-build has no C toolchain for goos, as
		// `GOOS=darwin go build` on Linux has none.
		Env: append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0", "GOFLAGS=-mod=readonly"),
	}
	roots, err := packages.Load(cfg, patterns...)
	if err != nil {
		return counts{}, err
	}
	var n counts
	n.packages = len(roots)
	packages.Visit(roots, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			fmt.Fprintf(stderr, "GOOS=%s %s: %s\n", goos, p.PkgPath, e)
			n.errors++
		}
	})
	return n, nil
}
