package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/coreos/go-systemd/v22/unit"
	"github.com/spf13/pflag"

	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// serveUnitDirs are where systemd looks for pullguard.service and its
// drop-ins (pullguard.service.d/*.conf), the first directory winning.
var serveUnitDirs = nodeinstall.UnitDirs

const serveUnitName = "pullguard.service"

// maxUnitBytes bounds a unit file doctor reads.
const maxUnitBytes = 1 << 20

// unitSetting is one assignment of a unit's [Service] section.
type unitSetting struct {
	value string
	file  string
	line  int
}

func (s unitSetting) where() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// serveUnit is serve's systemd unit as systemd reads it: the unit file,
// then its drop-ins in name order.
type serveUnit struct {
	files []string
	// settings are the [Service] assignments by name, in order.
	settings map[string][]unitSetting
	// exec is the effective ExecStart, args its words, serve's flags
	// parsed from them by serve's own command line.
	exec  unitSetting
	args  []string
	flags map[string]string
	// set tells the flags ExecStart gives (the others are serve's
	// defaults).
	set map[string]bool
}

// findServeUnit returns the unit file and its drop-ins: of path, and the
// drop-ins beside it, when it is given; else of pullguard.service in
// systemd's directories under root, with its drop-ins as systemd applies
// them ("" when there is none).
func findServeUnit(root, path string) (string, []string) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", nil
		}
		dropins, _ := filepath.Glob(filepath.Join(path+".d", "*.conf"))
		sort.Strings(dropins)
		return path, dropins
	}
	for _, d := range serveUnitDirs {
		if p := filepath.Join(root, d, serveUnitName); fileExists(p) {
			path = p
			break
		}
	}
	if path == "" {
		return "", nil
	}
	var dropins []string
	for _, d := range nodeinstall.DropIns(root, serveUnitName) {
		dropins = append(dropins, filepath.Join(root, d))
	}
	return path, dropins
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readServeUnit reads serve's unit and its drop-ins: the [Service]
// settings, and serve's flags from the effective ExecStart, parsed by
// serve's own flag set (so an unset flag has serve's default).
func readServeUnit(path string, dropins []string) (*serveUnit, error) {
	u := &serveUnit{settings: map[string][]unitSetting{}}
	for _, f := range append([]string{path}, dropins...) {
		if err := u.readFile(f); err != nil {
			return nil, err
		}
	}
	execs := u.settings["ExecStart"]
	if len(execs) == 0 || execs[len(execs)-1].value == "" {
		return nil, fmt.Errorf("%s: no ExecStart in [Service]", path)
	}
	u.exec = execs[len(execs)-1]
	words, err := nodeinstall.SplitCommandLine(u.exec.value)
	if err != nil {
		return nil, fmt.Errorf("%s: ExecStart: %w", u.exec.where(), err)
	}
	u.args = words
	if len(words) < 2 || words[1] != "serve" {
		return nil, fmt.Errorf("%s: ExecStart does not run `pullguard serve`: %q", u.exec.where(), u.exec.value)
	}
	cmd := newServeCommand()
	if err := cmd.ParseFlags(words[2:]); err != nil {
		return nil, fmt.Errorf("%s: ExecStart: serve refuses its flags: %w", u.exec.where(), err)
	}
	u.flags, u.set = map[string]string{}, map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		u.flags[f.Name] = f.Value.String()
		u.set[f.Name] = f.Changed
	})
	return u, nil
}

// readFile adds the [Service] settings of one unit file. An empty value
// resets a list setting, as in systemd.
func (u *serveUnit) readFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("serve's unit: %w", err)
	}
	defer f.Close()
	data, err := boundedread.Read(f, maxUnitBytes)
	if err != nil {
		return fmt.Errorf("serve's unit %s: %w", path, err)
	}
	opts, err := unit.DeserializeOptions(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("serve's unit %s: %w", path, err)
	}
	lines := optionLines(data)
	seen := map[string]int{}
	u.files = append(u.files, path)
	for _, o := range opts {
		n := lines[o.Section+"/"+o.Name]
		i := seen[o.Section+"/"+o.Name]
		seen[o.Section+"/"+o.Name]++
		if o.Section != "Service" {
			continue
		}
		line := 0
		if i < len(n) {
			line = n[i]
		}
		if o.Value == "" {
			u.settings[o.Name] = nil
		}
		u.settings[o.Name] = append(u.settings[o.Name], unitSetting{value: o.Value, file: path, line: line})
	}
	return nil
}

// optionLines gives the line numbers of each section/name assignment of a
// unit file, in order (continuation lines belong to the first).
func optionLines(data []byte) map[string][]int {
	lines := map[string][]int{}
	section, cont := "", false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), maxUnitBytes)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		wasCont := cont
		cont = strings.HasSuffix(l, "\\")
		switch {
		case wasCont, l == "", l[0] == '#', l[0] == ';':
		case l[0] == '[' && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
		default:
			if name, _, ok := strings.Cut(l, "="); ok {
				key := section + "/" + strings.TrimSpace(name)
				lines[key] = append(lines[key], n)
			}
		}
	}
	return lines
}

// last is the last value of a setting ("" when unset).
func (u *serveUnit) last(name string) (unitSetting, bool) {
	s := u.settings[name]
	if len(s) == 0 {
		return unitSetting{}, false
	}
	return s[len(s)-1], true
}

// flagWhere is where to change serve's flag: the unit line that gives
// it, else the ExecStart line.
func (u *serveUnit) flagWhere(name string) string {
	if u.set[name] {
		if data, err := os.ReadFile(u.exec.file); err == nil {
			for i, l := range strings.Split(string(data), "\n") {
				if i+1 >= u.exec.line && strings.Contains(l, "--"+name) {
					return fmt.Sprintf("%s:%d", u.exec.file, i+1)
				}
			}
		}
	}
	return u.exec.where()
}

// hides tells whether the unit's sandbox hides path from serve
// (ProtectHome on a home directory, InaccessiblePaths,
// TemporaryFileSystem; ReadOnlyPaths and ProtectSystem leave it readable):
// what hides it and the fix, both with the file and line of the setting.
// homes are the directories ProtectHome covers.
func (u *serveUnit) hides(path string, homes []string) (by, fix string, hidden bool) {
	if ph, ok := u.last("ProtectHome"); ok {
		switch strings.ToLower(ph.value) {
		case "yes", "true", "on", "1", "tmpfs":
			for _, h := range homes {
				if under(path, h) {
					return fmt.Sprintf("%s: ProtectHome=%s hides %s", ph.where(), ph.value, h),
						fmt.Sprintf("%s: set ProtectHome=read-only", ph.where()), true
				}
			}
		}
	}
	for _, name := range []string{"InaccessiblePaths", "TemporaryFileSystem"} {
		for _, s := range u.settings[name] {
			for _, word := range strings.Fields(s.value) {
				p := strings.TrimLeft(word, "-+")
				if name == "TemporaryFileSystem" {
					p, _, _ = strings.Cut(p, ":")
				}
				if p != "" && under(path, p) {
					return fmt.Sprintf("%s: %s=%s hides %s", s.where(), name, s.value, p),
						fmt.Sprintf("%s: remove %s from %s=", s.where(), word, name), true
				}
			}
		}
	}
	return "", "", false
}

// under tells whether path is dir or inside it.
func under(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
