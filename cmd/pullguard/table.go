package main

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tableWidth is the width the default tables fit in, as a terminal of 120
// columns shows them; -o wide does not truncate.
const tableWidth = 120

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
}

// table is rows of cells printed in aligned columns, two spaces apart.
type table struct {
	cols []column
	rows [][]string
}

func (t *table) add(cells ...string) {
	row := make([]string, len(t.cols))
	for i := range row {
		if i < len(cells) {
			row[i] = sanitize(cells[i])
		}
	}
	t.rows = append(t.rows, row)
}

// write prints the table; with width > 0 the widest columns are cut, down
// to their minimum, until each line fits in width.
func (t *table) write(w io.Writer, width int) error {
	widths := make([]int, len(t.cols))
	for i, c := range t.cols {
		widths[i] = utf8.RuneCountInString(c.header)
		for _, r := range t.rows {
			widths[i] = max(widths[i], utf8.RuneCountInString(r[i]))
		}
	}
	if width > 0 {
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
	var b strings.Builder
	line := func(cells []string) {
		b.Reset()
		for i, c := range cells {
			c = cut(c, widths[i], t.cols[i].cutEnd)
			b.WriteString(c)
			if i < len(cells)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	headers := make([]string, len(t.cols))
	for i, c := range t.cols {
		headers[i] = c.header
	}
	line(headers)
	for _, r := range t.rows {
		line(r)
	}
	return nil
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
