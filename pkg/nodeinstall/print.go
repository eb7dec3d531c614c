package nodeinstall

import (
	"fmt"
	"io"
	"strings"
)

// maxShownLines bounds the lines of a created file that Print shows.
const maxShownLines = 30

// Print writes changes as a list, one file a line ("action path: why"),
// with the lines a change adds ("+") and removes ("-") below a changed
// file and a small created one; never those of an Opaque one.
func Print(w io.Writer, changes []Change) {
	for _, c := range changes {
		fmt.Fprintf(w, "%-9s %s", c.Action, c.Path)
		if c.Why != "" {
			fmt.Fprintf(w, ": %s", c.Why)
		}
		fmt.Fprintln(w)
		if c.Opaque {
			continue
		}
		switch c.Action {
		case Modify, Restore:
			for _, l := range diffLines(lines(c.Old), lines(c.Data)) {
				fmt.Fprintf(w, "    %s\n", l)
			}
		case Create:
			if ls := lines(c.Data); len(ls) <= maxShownLines {
				for _, l := range ls {
					fmt.Fprintf(w, "    + %s\n", l)
				}
			}
		}
	}
}

func lines(data []byte) []string {
	s := strings.TrimSuffix(string(data), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// diffLines returns the lines only a has ("- ") and only b has ("+ "), in
// order, from their longest common subsequence.
func diffLines(a, b []string) []string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+a[i])
			i++
		default:
			out = append(out, "+ "+b[j])
			j++
		}
	}
	return out
}
