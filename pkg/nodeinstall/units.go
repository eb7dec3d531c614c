package nodeinstall

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/coreos/go-systemd/v22/unit"
)

// execStart returns the words of a unit's last ExecStart=.
func execStart(data []byte) ([]string, error) {
	cmd := unitValue(data, "Service", "ExecStart")
	if cmd == "" {
		return nil, fmt.Errorf("no ExecStart")
	}
	words, err := SplitCommandLine(cmd)
	if err != nil {
		return nil, fmt.Errorf("ExecStart: %w", err)
	}
	if len(words) < 2 {
		return nil, fmt.Errorf("ExecStart: %q is no pullguard command", cmd)
	}
	return words, nil
}

// unitValue returns the last value of a unit's option, "" when none.
func unitValue(data []byte, section, name string) string {
	opts, err := unit.DeserializeOptions(bytes.NewReader(data))
	if err != nil {
		return ""
	}
	v := ""
	for _, o := range opts {
		if o.Section == section && o.Name == name {
			v = o.Value
		}
	}
	return v
}

// setFlag sets --name in a command line's words (value "" removes it).
func setFlag(words []string, name, value string) []string {
	var out []string
	set := false
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "--"+name:
			if i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
				i++
			}
		case strings.HasPrefix(w, "--"+name+"="):
		default:
			out = append(out, w)
			continue
		}
		if value != "" && !set {
			out = append(out, "--"+name, value)
			set = true
		}
	}
	if value != "" && !set {
		out = append(out, "--"+name, value)
	}
	return out
}

// serveDropIn is serve's drop-in: its ExecStart with the kubelet's files.
func (p *Plan) serveDropIn(words []string, configDir string) ([]byte, error) {
	k := p.Kubelet
	for _, f := range []struct{ serve, value string }{
		{"image-service-endpoint", p.Runtime},
		{"config", k.Flag(FlagConfig)},
		{"config-dir", configDir},
		{"kubelet-root-dir", k.RootDir()},
		{"image-credential-provider-config", k.Flag(FlagProviderConfig)},
		{"image-credential-provider-bin-dir", k.Flag(FlagProviderBinDir)},
	} {
		words = setFlag(words, f.serve, f.value)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by `pullguard install` from the kubelet's unit (%s): serve reads\n", k.ExecStartFile)
	b.WriteString("# the kubelet's own files and asks its runtime. `pullguard uninstall` removes it.\n")
	b.WriteString("[Service]\nExecStart=\nExecStart=")
	for i, w := range words {
		if i > 0 {
			if strings.HasPrefix(w, "-") {
				b.WriteString(" \\\n  ")
			} else {
				b.WriteString(" ")
			}
		}
		b.WriteString(quoteWord(w))
	}
	b.WriteString("\n")
	// The kubelet's HOME and working directory, where its search for the
	// node's docker credentials goes ($HOME/.docker, the working
	// directory): serve's unit sets neither HOME nor User=, so serve has no
	// HOME, as kubeadm's kubelet, unless the kubelet has one.
	if k.Home != "" || k.WorkDir != "/" {
		fmt.Fprintf(&b, "# The kubelet's HOME and working directory: serve searches the node's docker\n# credentials where the kubelet does.\n")
	}
	if k.Home != "" {
		fmt.Fprintf(&b, "Environment=%s\n", quoteWord("HOME="+k.Home))
	}
	if k.WorkDir != "/" {
		fmt.Fprintf(&b, "WorkingDirectory=%s\n", k.WorkDir)
	}
	return []byte(b.String()), nil
}

// quoteWord quotes a word of a command line for systemd when it needs it.
func quoteWord(w string) string {
	if w != "" && !strings.ContainsAny(w, " \t\n\"'\\$;%") {
		return w
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `$$`, `%`, `%%`)
	return `"` + r.Replace(w) + `"`
}

// addConfigDir plans --config-dir for a kubelet that has none: in the
// distribution's flags file (KUBELET_EXTRA_ARGS, which kubeadm never
// rewrites) when the unit reads one, else in a drop-in of kubelet.service
// that gives ExecStart again with the flag.
func (p *Plan) addConfigDir(o Options, dir string) error {
	k := p.Kubelet
	flag := "--" + FlagConfigDir + "=" + dir
	extra := strings.Contains(k.ExecStart, "$KUBELET_EXTRA_ARGS") || strings.Contains(k.ExecStart, "${KUBELET_EXTRA_ARGS}")
	var file string
	for _, f := range k.EnvFiles {
		if slices.Contains([]string{"/etc/default/kubelet", "/etc/sysconfig/kubelet"}, f) {
			file = f
		}
	}
	if extra && file != "" {
		old, err := os.ReadFile(hostPath(o.Root, file))
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("kubelet flags file: %w", err)
		}
		return p.change(o, file, addExtraArg(old, flag), "the kubelet reads its --config-dir, which `kubeadm upgrade` does not rewrite")
	}
	data := fmt.Sprintf("# Written by `pullguard install`: the kubelet's command line (%s) with a\n"+
		"# --config-dir, which `kubeadm upgrade` does not rewrite. `pullguard uninstall` removes it.\n"+
		"[Service]\nExecStart=\nExecStart=%s %s\n", k.ExecStartFile, k.ExecStart, flag)
	return p.change(o, path.Join(etcUnits, "kubelet.service.d", configDirDropIn), []byte(data), "the kubelet reads its --config-dir")
}

// addExtraArg adds arg to the last KUBELET_EXTRA_ARGS= line of a flags
// file, inside its quotes, keeping every other line; it adds the line when
// there is none.
func addExtraArg(data []byte, arg string) []byte {
	lines := strings.SplitAfter(string(data), "\n")
	last := -1
	for _, v := range ParseEnvFile(data) {
		if v.Name == "KUBELET_EXTRA_ARGS" {
			last = v.Line - 1
		}
	}
	if last < 0 {
		out := string(data)
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		return []byte(out + "KUBELET_EXTRA_ARGS=" + arg + "\n")
	}
	line := lines[last]
	body := strings.TrimRight(line, "\r\n")
	eol := line[len(body):]
	trimmed := strings.TrimRight(body, " \t")
	_, value, _ := strings.Cut(trimmed, "=")
	value = strings.TrimLeft(value, " \t")
	switch {
	case value == "":
		body = trimmed + arg
	case wholeQuoted(value):
		q := trimmed[len(trimmed)-1:]
		inner := trimmed[:len(trimmed)-1]
		if len(value) == 2 {
			body = inner + arg + q
		} else {
			body = inner + " " + arg + q
		}
	default:
		// Unquoted, or quotes that close before the end (a flag's quoted
		// value, several quoted words): the argument goes after them.
		body = trimmed + " " + arg
	}
	lines[last] = body + eol
	return []byte(strings.Join(lines, ""))
}

// wholeQuoted says whether an assignment's value is one quoted string:
// its first quote closes at its last character (in double quotes, a
// backslash escapes the next character).
func wholeQuoted(v string) bool {
	if len(v) < 2 || (v[0] != '"' && v[0] != '\'') {
		return false
	}
	for i := 1; i < len(v); i++ {
		switch {
		case v[0] == '"' && v[i] == '\\':
			i++
		case v[i] == v[0]:
			return i == len(v)-1
		}
	}
	return false
}
