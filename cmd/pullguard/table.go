package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"
)

// tableWidth is the width the default tables fit in when the output is
// not a terminal (a pipe, a file) and COLUMNS is not set; -o wide does not
// fit.
const tableWidth = 120

// fitWidth is the width the tables of format fit in: none for -o wide;
// otherwise COLUMNS when it holds a positive number (as for ls), else the
// width of the terminal out is, else tableWidth.
func fitWidth(out io.Writer, format string) int {
	if format == formatWide {
		return 0
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if f, ok := out.(*os.File); ok {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			return w
		}
	}
	return tableWidth
}

// sanitize makes text from anywhere (a registry's error, a manifest's
// names) safe to print on one line of a terminal: control characters
// (newlines, tabs, escape sequences, C1 controls) and the Unicode
// characters that reorder or hide text are written as Go escapes, so that
// no input can forge a row, a column or a colour.
func sanitize(s string) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unsafeRune(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidirectional overrides and marks
	case r == 0x2028 || r == 0x2029 || r == 0x85:
		return true // line and paragraph separators
	}
	return false
}

// column of a table: how its cells are cut when the table is too wide.
type column struct {
	header string
	// cutEnd cuts the end of a long cell (messages); otherwise the middle
	// is cut, keeping both ends (names, images: the tag stays visible).
	cutEnd bool
	// min is the narrowest the column is cut to.
	min int
	// first: the column is cut (down to min) before any other.
	first bool
	// wrap: a long cell goes on over the next lines, broken at spaces,
	// instead of being cut.
	wrap bool
}

// table is rows of cells printed in aligned columns, two spaces apart, and
// titles on lines of their own between them.
type table struct {
	cols []column
	rows []row
}

// row is either cells or a title.
type row struct {
	cells []string
	title string
}

func (t *table) add(cells ...string) {
	r := make([]string, len(t.cols))
	for i := range r {
		if i < len(cells) {
			r[i] = sanitize(cells[i])
		}
	}
	t.rows = append(t.rows, row{cells: r})
}

// addTitle adds a line of its own (a group's heading), cut at the end to
// the table's width.
func (t *table) addTitle(title string) {
	t.rows = append(t.rows, row{title: sanitize(title)})
}

// write prints the table; with width > 0 the widest columns are cut, down
// to their minimum, until each line fits in width.
func (t *table) write(w io.Writer, width int) error {
	widths := t.naturalWidths()
	if width > 0 {
		t.fit(widths, width)
	}
	headers := make([]string, len(t.cols))
	for i, c := range t.cols {
		headers[i] = c.header
	}
	t.writeLine(w, headers, widths)
	for _, r := range t.rows {
		if r.cells == nil {
			title := r.title
			if width > 0 {
				title = cut(title, width, true)
			}
			fmt.Fprintln(w, title)
			continue
		}
		t.writeLine(w, r.cells, widths)
	}
	return nil
}

// naturalWidths are the widths, in runes, of each column's widest cell or
// header.
func (t *table) naturalWidths() []int {
	widths := make([]int, len(t.cols))
	for i, c := range t.cols {
		widths[i] = utf8.RuneCountInString(c.header)
		for _, r := range t.rows {
			if r.cells != nil {
				widths[i] = max(widths[i], utf8.RuneCountInString(r.cells[i]))
			}
		}
	}
	return widths
}

// fit narrows widths until a line, its columns two spaces apart, fits in
// width: a rune at a time from the widest column, the columns marked first
// before the others, none below its minimum or its header. A table whose
// columns are all at their minimum stays wider.
func (t *table) fit(widths []int, width int) {
	total := func() int {
		n := 2 * (len(widths) - 1)
		for _, v := range widths {
			n += v
		}
		return n
	}
	widest := func(firstOnly bool) int {
		w := -1
		for i, v := range widths {
			c := t.cols[i]
			if (!firstOnly || c.first) && v > max(c.min, utf8.RuneCountInString(c.header)) && (w < 0 || v > widths[w]) {
				w = i
			}
		}
		return w
	}
	for total() > width {
		i := widest(true)
		if i < 0 {
			i = widest(false)
		}
		if i < 0 {
			break // every column at its minimum
		}
		widths[i]--
	}
}

// writeLine prints one row of cells in columns of widths: a cell of a
// wrapped column goes on over as many lines as it needs, the other cells,
// cut to their width, are on the first.
func (t *table) writeLine(w io.Writer, cells []string, widths []int) {
	parts := make([][]string, len(cells))
	height := 1
	for i, c := range cells {
		if t.cols[i].wrap {
			parts[i] = wrapText(c, widths[i])
		} else {
			parts[i] = []string{cut(c, widths[i], t.cols[i].cutEnd)}
		}
		height = max(height, len(parts[i]))
	}
	var b strings.Builder
	for l := range height {
		b.Reset()
		for i := range cells {
			c := ""
			if l < len(parts[i]) {
				c = parts[i][l]
			}
			b.WriteString(c)
			if i < len(cells)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// wrapText breaks s into lines of at most n runes, at spaces; a word
// longer than a line is cut into pieces of n runes.
func wrapText(s string, n int) []string {
	n = max(n, 1)
	var lines []string
	cur := ""
	for _, word := range strings.Fields(s) {
		for utf8.RuneCountInString(word) > n {
			if cur != "" {
				lines, cur = append(lines, cur), ""
			}
			r := []rune(word)
			lines, word = append(lines, string(r[:n])), string(r[n:])
		}
		switch {
		case word == "":
		case cur == "":
			cur = word
		case utf8.RuneCountInString(cur)+1+utf8.RuneCountInString(word) <= n:
			cur += " " + word
		default:
			lines, cur = append(lines, cur), word
		}
	}
	if cur != "" || len(lines) == 0 {
		lines = append(lines, cur)
	}
	return lines
}

// cut shortens s to n runes, marking the cut with "…".
func cut(s string, n int, atEnd bool) string {
	runes := []rune(s)
	if len(runes) <= n {
		return s
	}
	if n <= 1 {
		return "…"
	}
	if atEnd {
		return string(runes[:n-1]) + "…"
	}
	head := (n - 1) / 2
	tail := n - 1 - head
	return string(runes[:head]) + "…" + string(runes[len(runes)-tail:])
}
