package nodeinstall

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/coreos/go-systemd/v22/unit"
)

// UnitDirs are systemd's system unit directories, the first one's files
// overriding the others' of the same name.
var UnitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// The kubelet flags install reads.
const (
	FlagConfig           = "config"
	FlagConfigDir        = "config-dir"
	FlagRuntimeEndpoint  = "container-runtime-endpoint"
	FlagImageEndpoint    = "image-service-endpoint"
	FlagProviderConfig   = "image-credential-provider-config"
	FlagProviderBinDir   = "image-credential-provider-bin-dir"
	FlagRootDir          = "root-dir"
	defaultKubeletRoot   = "/var/lib/kubelet"
	defaultKubeletBinary = "/usr/bin/kubelet"
)

// Kubelet is the kubelet as its systemd unit starts it. Paths are the
// node's (without the host root).
type Kubelet struct {
	// Unit is kubelet.service's file, DropIns its kubelet.service.d/*.conf
	// in the order systemd applies them.
	Unit    string
	DropIns []string
	// ExecStart is the command line, as written, and ExecStartFile the unit
	// file that gave it.
	ExecStart     string
	ExecStartFile string
	// Binary is the command line's executable.
	Binary string
	// EnvFiles are the EnvironmentFile= of the unit, in order, without
	// systemd's "-" (a missing one is skipped); Env the variables they and
	// Environment= set, Vars where each was set.
	EnvFiles []string
	Env      map[string]string
	Vars     map[string]Flag
	// Flags are the kubelet's flags on its expanded command line, the last
	// value winning, each with the file (and line) that gave it.
	Flags map[string]Flag
	// Home is the kubelet's $HOME as systemd gives it: HOME of Environment=
	// or EnvironmentFile=, else the home of its unit's User= in the host's
	// /etc/passwd, else "" (no HOME: kubeadm's unit). HomeFrom is the line
	// that gives it.
	Home     string
	HomeFrom Flag
	// User is its unit's User=, "" for none (root).
	User string
	// WorkDir is its working directory: WorkingDirectory=, "/" by
	// default, "~" its Home.
	WorkDir string
}

// Flag returns a flag's value, "" when it is not given.
func (k *Kubelet) Flag(name string) string { return k.Flags[name].Value }

// RootDir is the kubelet's --root-dir.
func (k *Kubelet) RootDir() string {
	if d := k.Flag(FlagRootDir); d != "" {
		return d
	}
	return defaultKubeletRoot
}

// ErrNoKubelet is returned by Discover when the host has no kubelet.service.
var ErrNoKubelet = errors.New("no kubelet.service in the systemd unit directories")

// Discover reads the kubelet's systemd unit under root: kubelet.service as
// systemd picks it from UnitDirs, its drop-ins, the environment they set
// and the flags on the command line they give.
func Discover(root string) (*Kubelet, error) { return discover(root, "") }

// discover is Discover without the kubelet drop-in named skip: install
// reads the kubelet as it is without what install itself gives it.
func discover(root, skip string) (*Kubelet, error) {
	k := &Kubelet{Env: map[string]string{}, Vars: map[string]Flag{}, Flags: map[string]Flag{}}
	for _, dir := range UnitDirs {
		p := filepath.Join(dir, "kubelet.service")
		if _, err := os.Stat(hostPath(root, p)); err == nil {
			k.Unit = p
			break
		}
	}
	if k.Unit == "" {
		return nil, fmt.Errorf("%w under %s", ErrNoKubelet, root)
	}
	for _, d := range dropIns(root, "kubelet.service") {
		if path.Base(d) != skip {
			k.DropIns = append(k.DropIns, d)
		}
	}
	var envFiles []string
	var userFrom Flag
	workDir := "/"
	for _, file := range append([]string{k.Unit}, k.DropIns...) {
		data, err := os.ReadFile(hostPath(root, file))
		if err != nil {
			return nil, fmt.Errorf("kubelet unit: %w", err)
		}
		opts, err := unit.DeserializeOptions(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("kubelet unit %s: %w", file, err)
		}
		for _, o := range opts {
			if o.Section != "Service" {
				continue
			}
			switch o.Name {
			case "ExecStart":
				k.ExecStart, k.ExecStartFile = o.Value, file
			case "Environment":
				words, err := SplitCommandLine(o.Value)
				if err != nil {
					return nil, fmt.Errorf("%s: Environment=: %w", file, err)
				}
				for _, w := range words {
					if name, value, ok := strings.Cut(w, "="); ok {
						k.Env[name], k.Vars[name] = value, Flag{File: file, Line: lineOf(data, "Environment", name)}
					}
				}
			case "User":
				k.User, userFrom = o.Value, Flag{File: file, Line: lineOf(data, "User", "")}
			case "WorkingDirectory":
				workDir = o.Value
			case "EnvironmentFile":
				if o.Value == "" {
					envFiles = nil
					continue
				}
				envFiles = append(envFiles, o.Value)
			}
		}
	}
	// systemd reads the files after Environment=, in order, when it starts
	// the unit: their variables override.
	for _, f := range envFiles {
		optional := strings.HasPrefix(f, "-")
		f = strings.TrimPrefix(f, "-")
		k.EnvFiles = append(k.EnvFiles, f)
		data, err := os.ReadFile(hostPath(root, f))
		if err != nil {
			if optional && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("kubelet unit's EnvironmentFile: %w", err)
		}
		for _, v := range ParseEnvFile(data) {
			k.Env[v.Name], k.Vars[v.Name] = v.Value, Flag{File: f, Line: v.Line}
		}
	}
	if err := k.environment(root, userFrom, workDir); err != nil {
		return nil, err
	}
	if k.ExecStart == "" {
		return nil, fmt.Errorf("%s: no ExecStart for the kubelet", k.Unit)
	}
	words, err := SplitCommandLine(k.ExecStart)
	if err != nil {
		return nil, fmt.Errorf("%s: ExecStart: %w", k.ExecStartFile, err)
	}
	expanded := Expand(words, k.Env)
	if len(expanded) == 0 {
		return nil, fmt.Errorf("%s: ExecStart is empty", k.ExecStartFile)
	}
	k.Binary = expanded[0].Text
	// Parse runs of words from one variable together, so that each flag is
	// traced to the file that set it.
	rest := expanded[1:]
	for len(rest) > 0 {
		n := 1
		for n < len(rest) && rest[n].Var == rest[0].Var {
			n++
		}
		var texts []string
		for _, w := range rest[:n] {
			texts = append(texts, w.Text)
		}
		where := Flag{File: k.ExecStartFile}
		if rest[0].Var != "" {
			where = k.Vars[rest[0].Var]
		}
		ParseFlags(texts, where.File, where.Line, k.Flags)
		rest = rest[n:]
	}
	return k, nil
}

// dropIns returns name's drop-ins (name.d/*.conf) from UnitDirs, sorted by
// file name, one of a name taken from the first directory that has it.
// DropIns returns the drop-ins (NAME.d/*.conf) of the unit name in
// systemd's unit directories under root, as systemd applies them: in name
// order, a name in an earlier directory hiding the same name in a later
// one. The paths are the host's (without root).
func DropIns(root, name string) []string { return dropIns(root, name) }

func dropIns(root, name string) []string {
	byName := map[string]string{}
	for _, dir := range UnitDirs {
		d := filepath.Join(dir, name+".d")
		entries, _ := os.ReadDir(hostPath(root, d))
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".conf") {
				continue
			}
			if _, ok := byName[e.Name()]; !ok {
				byName[e.Name()] = filepath.Join(d, e.Name())
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	files := make([]string, len(names))
	for i, n := range names {
		files[i] = byName[n]
	}
	return files
}

// lineOf returns the line of a unit file's option name=... that mentions
// what, 0 when there is none.
func lineOf(data []byte, name, what string) int {
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), name+"=") && strings.Contains(line, what) {
			return i + 1
		}
	}
	return 0
}

// maxLinks bounds the symbolic links hostPath follows in one path, as
// the kernel's ELOOP does (40).
const maxLinks = 40

// HostPath is the node's path p under root, resolved as hostPath does.
func HostPath(root, p string) string { return hostPath(root, p) }

// hostPath is the node's path p under root, with the node's symbolic
// links resolved as the node resolves them: an absolute link's target
// is under root too, and ".." stops at root, so that the path never
// leads out of root. Resolution stops at the first component that does
// not exist; the rest is taken as written. Past maxLinks links, the path
// is the root's own directory "..." (nothing is there), never a link
// followed out.
func hostPath(root, p string) string {
	if filepath.Clean(root) == "/" {
		return filepath.Join("/", p)
	}
	resolved := "/"
	rest := strings.Split(p, "/")
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		if c == "" || c == "." {
			continue
		}
		next := path.Join(resolved, c) // ".." above "/" stays at "/"
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > maxLinks {
			return filepath.Join(root, "...", "too many links", p)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			resolved = next
			continue
		}
		if path.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return filepath.Join(root, resolved)
}
