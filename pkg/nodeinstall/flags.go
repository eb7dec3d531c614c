package nodeinstall

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
)

// DefaultFlagsFiles are the kubelet's flags files, in the order the
// kubelet's systemd unit puts them on its command line (the last value of a
// flag wins): kubeadm's, then the distribution's KUBELET_EXTRA_ARGS.
var DefaultFlagsFiles = []string{"/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet"}

// Flag is a kubelet flag's value and where it was given: a flags file and
// the line of its variable, or a unit file (Line 0).
type Flag struct {
	Value string
	File  string
	Line  int
}

// Where is the place to change the flag: "file:line", or the file.
func (f Flag) Where() string {
	if f.Line == 0 {
		return f.File
	}
	return fmt.Sprintf("%s:%d", f.File, f.Line)
}

// boolFlags are the kubelet flags read here that take no separate value
// ("--serialize-image-pulls" alone means true).
var boolFlags = map[string]bool{"serialize-image-pulls": true}

// EnvVar is an assignment of an environment file.
type EnvVar struct {
	Name, Value string
	Line        int
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseEnvFile reads an environment file as systemd's EnvironmentFile= and
// a shell read the kubelet's flags files: NAME=VALUE lines, "#" and ";"
// comments, an optional "export ", the value's surrounding quotes removed
// and, inside double quotes, backslash escapes. Lines that are not
// assignments are skipped.
func ParseEnvFile(data []byte) []EnvVar {
	var vars []EnvVar
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !ok || !envName.MatchString(name) {
			continue
		}
		vars = append(vars, EnvVar{Name: name, Value: unquote(strings.TrimSpace(value)), Line: n})
	}
	return vars
}

// unquote removes a value's surrounding quotes; in double quotes, a
// backslash escapes the next character.
func unquote(v string) string {
	if len(v) < 2 || (v[0] != '"' && v[0] != '\'') || v[len(v)-1] != v[0] {
		return v
	}
	inner := v[1 : len(v)-1]
	if v[0] == '\'' || !strings.Contains(inner, `\`) {
		return inner
	}
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		if inner[i] == '\\' && i+1 < len(inner) {
			i++
		}
		b.WriteByte(inner[i])
	}
	return b.String()
}

// ParseFlags reads kubelet flags from args into flags, by name without the
// dashes, the last value winning, each noted as given at file:line.
// "--name=value", "--name value" and, for the boolean flags, "--name" are
// read; other words are skipped.
func ParseFlags(args []string, file string, line int, flags map[string]Flag) {
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			if name, ok = strings.CutPrefix(args[i], "-"); !ok || name == "" {
				continue
			}
		}
		value, hasValue := "", false
		if k, v, found := strings.Cut(name, "="); found {
			name, value, hasValue = k, v, true
		}
		switch {
		case hasValue:
		case boolFlags[name]:
			value = "true"
		case i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"):
			i++
			value = args[i]
		}
		flags[name] = Flag{Value: value, File: file, Line: line}
	}
}

var kubeletArgsVar = regexp.MustCompile(`^KUBELET_[A-Z_]*ARGS$`)

// ReadFlagsFiles reads the KUBELET_*ARGS variables of the flags files
// (missing files are skipped), in order, and returns each flag's last
// value. It is what doctor reads when it is given the files rather than the
// kubelet's unit (Discover).
func ReadFlagsFiles(files []string) (map[string]Flag, error) {
	flags := map[string]Flag{}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kubelet flags file: %w", err)
		}
		for _, v := range ParseEnvFile(data) {
			if kubeletArgsVar.MatchString(v.Name) {
				ParseFlags(strings.Fields(v.Value), path, v.Line, flags)
			}
		}
	}
	return flags, nil
}
