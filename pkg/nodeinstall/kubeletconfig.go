package nodeinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// ErrRefused is wrapped by the errors of a kubelet configuration install
// does not change: one it cannot parse, or one that points the kubelet's
// image service somewhere else than serve.
var ErrRefused = errors.New("refused")

// configFile is a KubeletConfiguration file (YAML or JSON) as a YAML node
// tree, which keeps its comments and the order of its keys.
type configFile struct {
	path string // the node's path
	data []byte
	doc  yaml.Node
	json bool
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// readConfig reads a kubelet configuration file; an error names the file
// and the line.
func readConfig(root, path string) (*configFile, error) {
	data, err := os.ReadFile(hostPath(root, path))
	if err != nil {
		return nil, fmt.Errorf("kubelet configuration: %w", err)
	}
	return parseConfig(path, data)
}

func parseConfig(path string, data []byte) (*configFile, error) {
	c := &configFile{path: path, data: data, json: strings.HasPrefix(strings.TrimSpace(string(data)), "{")}
	if !utf8.Valid(data) {
		line := 1
		for len(data) > 0 {
			r, n := utf8.DecodeRune(data)
			if r == utf8.RuneError && n <= 1 {
				break
			}
			if r == '\n' {
				line++
			}
			data = data[n:]
		}
		return nil, fmt.Errorf("%w: %s:%d: the kubelet configuration is not UTF-8", ErrRefused, path, line)
	}
	if err := yaml.Unmarshal(data, &c.doc); err != nil {
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			return nil, fmt.Errorf("%w: %s:%s: the kubelet configuration does not parse: %s", ErrRefused, path, m[1], strings.TrimPrefix(msg, m[0]))
		}
		return nil, fmt.Errorf("%w: %s:1: the kubelet configuration does not parse: %s", ErrRefused, path, strings.TrimPrefix(msg, "yaml: "))
	}
	if len(c.doc.Content) == 0 {
		// An empty file is an empty configuration.
		c.doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	if m := c.doc.Content[0]; m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: %s:%d: the kubelet configuration is not a mapping of fields", ErrRefused, path, m.Line)
	}
	return c, nil
}

func (c *configFile) root() *yaml.Node { return c.doc.Content[0] }

// field returns a top-level field's value node, nil when it is not set.
func (c *configFile) field(name string) *yaml.Node {
	m := c.root()
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name {
			return m.Content[i+1]
		}
	}
	return nil
}

// str returns a top-level string field and where it is ("file:line").
func (c *configFile) str(name string) (string, string) {
	n := c.field(name)
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", ""
	}
	return n.Value, fmt.Sprintf("%s:%d", c.path, n.Line)
}

// merge returns the file with the top-level fields of snippet set to
// snippet's values. A YAML file is edited as text: a field that is there
// has its value replaced on its line, a new one is added at the end with
// the snippet's comments, and every other byte stays. A JSON file (or a
// flow mapping) is written again as JSON, its keys in their order.
func (c *configFile) merge(snippet *yaml.Node) ([]byte, error) {
	out, err := c.mergeText(snippet)
	if err != nil {
		return nil, err
	}
	if err := c.sameBut(out, snippet); err != nil {
		return nil, fmt.Errorf("%w: %s: the kubelet settings cannot be merged into it keeping the rest (%v): set them by hand, or give the kubelet a --config-dir", ErrRefused, c.path, err)
	}
	return out, nil
}

// sameBut checks a merge: out parses, holds snippet's values and every
// other field of the file as it was.
func (c *configFile) sameBut(out []byte, snippet *yaml.Node) error {
	merged, err := parseConfig(c.path, out)
	if err != nil {
		return err
	}
	decode := func(n *yaml.Node) any {
		var v any
		if n != nil && n.Decode(&v) != nil {
			return "undecodable"
		}
		return v
	}
	fields := map[string]bool{}
	for i := 0; i+1 < len(snippet.Content); i += 2 {
		k := snippet.Content[i].Value
		fields[k] = true
		if (k == "apiVersion" || k == "kind") && c.field(k) != nil {
			continue
		}
		if !reflect.DeepEqual(decode(merged.field(k)), decode(snippet.Content[i+1])) {
			return fmt.Errorf("%s not set", k)
		}
	}
	m := c.root()
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i].Value
		if !fields[k] && !reflect.DeepEqual(decode(merged.field(k)), decode(m.Content[i+1])) {
			return fmt.Errorf("%s would change", k)
		}
	}
	if n := len(merged.root().Content); n > len(m.Content)+len(snippet.Content) {
		return fmt.Errorf("fields would be added")
	}
	return nil
}

func (c *configFile) mergeText(snippet *yaml.Node) ([]byte, error) {
	var add []*yaml.Node
	lines := strings.SplitAfter(string(c.data), "\n")
	for i := 0; i+1 < len(snippet.Content); i += 2 {
		key, value := snippet.Content[i], snippet.Content[i+1]
		old := c.field(key.Value)
		if old != nil && (key.Value == "apiVersion" || key.Value == "kind") {
			continue // the file's own
		}
		switch {
		case old == nil:
			add = append(add, key, value)
		case c.json || c.root().Style&yaml.FlowStyle != 0:
			*old = *value
		case old.Kind != yaml.ScalarNode || old.Line < 1 || old.Line > len(lines):
			return nil, fmt.Errorf("%w: %s:%d: %s is not a value on one line", ErrRefused, c.path, old.Line, key.Value)
		default:
			line := lines[old.Line-1]
			runes := []rune(line)
			if old.Column-1 > len(runes) {
				return nil, fmt.Errorf("%w: %s:%d: %s is not a value on one line", ErrRefused, c.path, old.Line, key.Value)
			}
			start := len(string(runes[:old.Column-1]))
			end := scalarEnd(line, start, old.Style)
			text, err := scalarText(value, old.Style)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", c.path, old.Line, err)
			}
			if start > 0 && line[start-1] == ':' {
				text = " " + text // an empty value: "field:"
			}
			lines[old.Line-1] = line[:start] + text + line[end:]
		}
	}
	if c.json || c.root().Style&yaml.FlowStyle != 0 {
		c.root().Content = append(c.root().Content, add...)
		var b bytes.Buffer
		if err := writeJSON(&b, c.root(), "", jsonIndent(c.data)); err != nil {
			return nil, fmt.Errorf("%s: %w", c.path, err)
		}
		b.WriteByte('\n')
		return b.Bytes(), nil
	}
	out := strings.Join(lines, "")
	if len(add) > 0 {
		first := *add[0]
		first.HeadComment = strings.TrimSpace("Set by `pullguard install`; `pullguard uninstall` gives this file back.\n" + first.HeadComment)
		add[0] = &first
		var b bytes.Buffer
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(&yaml.Node{Kind: yaml.MappingNode, Content: add}); err != nil {
			return nil, fmt.Errorf("%s: %w", c.path, err)
		}
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		// At the column of the file's fields.
		indent := strings.Repeat(" ", max(c.root().Column-1, 0))
		for _, line := range strings.SplitAfter(b.String(), "\n") {
			if strings.TrimSpace(line) != "" {
				line = indent + line
			}
			out += line
		}
	}
	return []byte(out), nil
}

// scalarEnd returns where, in line, the scalar that starts at start ends:
// after its closing quote, or, for a plain scalar, before a comment or the
// end of the line.
func scalarEnd(line string, start int, style yaml.Style) int {
	rest := line[start:]
	switch {
	case style&yaml.DoubleQuotedStyle != 0:
		for i := 1; i < len(rest); i++ {
			if rest[i] == '\\' {
				i++
				continue
			}
			if rest[i] == '"' {
				return start + i + 1
			}
		}
	case style&yaml.SingleQuotedStyle != 0:
		for i := 1; i < len(rest); i++ {
			if rest[i] == '\'' {
				if i+1 < len(rest) && rest[i+1] == '\'' {
					i++
					continue
				}
				return start + i + 1
			}
		}
	}
	end := len(strings.TrimRight(rest, "\r\n"))
	if i := strings.Index(rest, " #"); i >= 0 && i < end {
		end = i
	}
	return start + len(strings.TrimRight(rest[:end], " \t"))
}

// scalarText is a scalar's YAML text in the quoting style of the value it
// replaces.
func scalarText(value *yaml.Node, style yaml.Style) (string, error) {
	n := *value
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	if n.Tag == "!!str" || n.Tag == "" && n.Style == 0 {
		n.Style = style & (yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle)
	}
	out, err := yaml.Marshal(&n)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(out), "\n"), nil
}

// jsonIndent is the indentation of a JSON file's first indented line, two
// spaces when it has none.
func jsonIndent(data []byte) string {
	for _, line := range strings.Split(string(data), "\n") {
		if trimmed := strings.TrimLeft(line, " \t"); trimmed != line && trimmed != "" {
			return line[:len(line)-len(trimmed)]
		}
	}
	return "  "
}

// writeJSON writes a node as JSON indented by unit, mappings in their
// order.
func writeJSON(b *bytes.Buffer, n *yaml.Node, indent, unit string) error {
	switch n.Kind {
	case yaml.MappingNode, yaml.SequenceNode:
		open, close, step := "{", "}", 2
		if n.Kind == yaml.SequenceNode {
			open, close, step = "[", "]", 1
		}
		if len(n.Content) == 0 {
			b.WriteString(open + close)
			return nil
		}
		b.WriteString(open + "\n")
		for i := 0; i < len(n.Content); i += step {
			b.WriteString(indent + unit)
			if step == 2 {
				k, _ := json.Marshal(n.Content[i].Value)
				b.Write(k)
				b.WriteString(": ")
			}
			if err := writeJSON(b, n.Content[i+step-1], indent+unit, unit); err != nil {
				return err
			}
			if i+step < len(n.Content) {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + close)
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return err
		}
		out, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.Write(out)
	case yaml.AliasNode:
		return writeJSON(b, n.Alias, indent, unit)
	default:
		return fmt.Errorf("line %d: a YAML node JSON cannot hold", n.Line)
	}
	return nil
}

// dropInFiles returns the kubelet's --config-dir files the kubelet reads
// (*.conf, through subdirectories), in the order it merges them: the
// lexical walk order, where a directory's files come in its name's place
// (a/x.conf before a.conf), as nodeconfig.LoadKubeletConfigDir reads them.
func dropInFiles(root, dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(hostPath(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == hostPath(root, dir) {
				return filepath.SkipDir
			}
			return err
		}
		if !d.IsDir() && filepath.Ext(d.Name()) == ".conf" {
			rel, _ := filepath.Rel(root, p)
			files = append(files, "/"+rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet --config-dir %s: %w", dir, err)
	}
	return files, nil
}

// setting is a kubelet setting's effective value and where it was given.
type setting struct {
	value, where string
}

// effective returns the value of a kubelet setting as the kubelet reads
// it: the file, then the --config-dir drop-ins in order, then the flag.
func effective(configs []*configFile, field string, k *Kubelet, flag string) setting {
	var s setting
	for _, c := range configs {
		if v, where := c.str(field); where != "" {
			s = setting{v, where}
		}
	}
	if f, ok := k.Flags[flag]; ok {
		s = setting{f.Value, f.Where() + ": --" + flag}
	}
	return s
}

// sameEndpoint says whether two CRI endpoints name one socket.
func sameEndpoint(a, b string) bool {
	norm := func(e string) string {
		e = strings.TrimPrefix(e, "unix://")
		return filepath.Clean(e)
	}
	return norm(a) == norm(b)
}

// kubeletMinor returns the minor version of a "Kubernetes v1.31.2" line.
func kubeletMinor(out string) (int, error) {
	f := strings.Fields(out)
	if len(f) < 2 {
		return 0, fmt.Errorf("unknown version %q", strings.TrimSpace(out))
	}
	parts := strings.SplitN(strings.TrimPrefix(f[len(f)-1], "v"), ".", 3)
	if len(parts) < 2 || parts[0] != "1" {
		return 0, fmt.Errorf("unknown version %q", strings.TrimSpace(out))
	}
	return strconv.Atoi(parts[1])
}
