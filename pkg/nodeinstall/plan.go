package nodeinstall

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/pullguard/pullguard/deploy"
)

// Where install puts what it writes.
const (
	// ServeUnit is serve's unit, ServeDropIn the drop-in that gives serve
	// the kubelet's files.
	ServeUnit   = "pullguard.service"
	ServeDropIn = "/etc/systemd/system/pullguard.service.d/20-kubelet.conf"
	// KubeletDropIn is the file install puts in the kubelet's --config-dir:
	// the kubelet merges *.conf files in lexical order, so it comes last.
	KubeletDropIn = "99-pullguard.conf"
	// DefaultConfigDir is the --config-dir install gives a kubelet that has
	// none.
	DefaultConfigDir = "/etc/kubernetes/kubelet.conf.d"
	// configDirMinor is the first kubelet minor release (1.x) whose
	// --config-dir is on by default.
	configDirMinor = 31
	// defaultServeSocket and defaultStore are serve's defaults.
	defaultServeSocket = "unix:///run/pullguard/pullguard.sock"
	defaultStore       = "/var/lib/pullguard"
	defaultRuntime     = "unix:///run/containerd/containerd.sock"
	etcUnits           = "/etc/systemd/system"
	// configDirDropIn is the kubelet's systemd drop-in that gives it a
	// --config-dir when no flags file can.
	configDirDropIn = "90-pullguard-config-dir.conf"
)

// Action is what install or uninstall does to a file.
type Action string

// The actions of a Change.
const (
	Create  Action = "create"
	Modify  Action = "modify"
	Remove  Action = "remove"
	Restore Action = "restore"
	// Unchanged is a file that already holds what install writes.
	Unchanged Action = "unchanged"
	// Kept is a file uninstall leaves: it changed after install.
	Kept Action = "kept"
)

// Change is one file install or uninstall writes or removes.
type Change struct {
	Path   string
	Action Action
	// Why says what the file is for, or why it is kept.
	Why  string
	Data []byte
	Old  []byte
	Mode fs.FileMode
	// Serve says only serve reads the file (its units, drop-in, binary,
	// kubeconfig): a change of it restarts serve, not the kubelet.
	Serve bool
	// Opaque is a file whose bytes are not shown (a binary, a token).
	Opaque bool
}

// Plan is what an install does: its changes, and what the operator should
// know (Notes).
type Plan struct {
	Changes []Change
	Notes   []string
	// Root is the node's root file system the plan was made under.
	Root    string
	Kubelet *Kubelet
	// ServeSocket is serve's socket, Runtime the runtime's that serve is
	// given, Store serve's --root-dir, ServeMetrics its
	// --metrics-bind-address ("" for its default).
	ServeSocket, Runtime, Store, ServeMetrics string
	// Units are the units install writes or found from the package, by
	// name.
	Units []string
}

// Options are the settings of an install or uninstall.
type Options struct {
	// Root is the node's root file system ("/" on the node).
	Root string
	// KubeletVersion returns what `kubelet --version` prints; nil runs
	// the kubelet's binary under Root.
	KubeletVersion func(binary string) (string, error)
	// Binary, when set, is the pullguard binary install puts on the node
	// for serve to run, recorded in the manifest so that uninstall removes
	// it. On a node whose package put serve's units under
	// /usr/lib/systemd/system the package's binary runs, and Binary is
	// not copied.
	Binary *Binary
	// ServeArgs are flags (--name=value) set on serve's command line in
	// its drop-in, over the unit's own.
	ServeArgs []string
	// Files are more files install writes and records (serve's
	// kubeconfig), each only read by serve.
	Files []File
}

// Binary is the pullguard binary install copies: Source, a file of this
// process (such as /proc/self/exe), to Path, the node's.
type Binary struct {
	Path, Source string
}

// File is a file install writes: the node's Path, its bytes and mode;
// Opaque hides its bytes from Print (a token).
type File struct {
	Path   string
	Data   []byte
	Mode   fs.FileMode
	Why    string
	Opaque bool
}

func (o Options) kubeletVersion(binary string) (string, error) {
	if o.KubeletVersion != nil {
		return o.KubeletVersion(binary)
	}
	out, err := exec.Command(hostPath(o.Root, binary), "--version").Output()
	return string(out), err
}

// PlanInstall reads the node under o.Root and returns what install would
// write. It writes nothing. A kubelet configuration it cannot parse, or
// whose image service is not serve's, is refused (ErrRefused) with the
// file and line.
func PlanInstall(o Options) (*Plan, error) {
	k, err := discover(o.Root, configDirDropIn)
	if err != nil {
		return nil, err
	}
	p := &Plan{Kubelet: k, Root: o.Root}
	serveArgs, err := p.units(o)
	if err != nil {
		return nil, err
	}

	// The kubelet's configuration: its file, then its drop-ins.
	var configs []*configFile
	var main *configFile
	if path := k.Flag(FlagConfig); path != "" {
		if main, err = readConfig(o.Root, path); err != nil {
			return nil, err
		}
		configs = append(configs, main)
	}
	configDir := k.Flag(FlagConfigDir)
	if configDir != "" {
		files, err := dropInFiles(o.Root, configDir)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if path.Base(f) == KubeletDropIn {
				continue // install's own: what it writes again
			}
			c, err := readConfig(o.Root, f)
			if err != nil {
				return nil, err
			}
			configs = append(configs, c)
		}
	}
	if image := effective(configs, "imageServiceEndpoint", k, FlagImageEndpoint); image.value != "" && !sameEndpoint(image.value, p.ServeSocket) {
		return nil, fmt.Errorf("%w: %s: the kubelet's image service is %s, not serve's %s: remove it, or point it at serve's socket",
			ErrRefused, image.where, image.value, p.ServeSocket)
	}
	p.Runtime = effective(configs, "containerRuntimeEndpoint", k, FlagRuntimeEndpoint).value
	if p.Runtime == "" {
		p.Runtime = defaultRuntime
	}
	if sameEndpoint(p.Runtime, p.ServeSocket) {
		return nil, fmt.Errorf("%w: the kubelet's containerRuntimeEndpoint is serve's socket %s: give it the runtime's", ErrRefused, p.Runtime)
	}
	for _, flag := range []string{"registry-qps", "serialize-image-pulls"} {
		if f, ok := k.Flags[flag]; ok {
			p.Notes = append(p.Notes, fmt.Sprintf("%s: --%s=%s overrides the kubelet's configuration files: see `pullguard doctor`", f.Where(), flag, f.Value))
		}
	}

	settings, err := kubeletSettings(p.ServeSocket)
	if err != nil {
		return nil, err
	}
	switch {
	case configDir != "":
		if err := p.dropIn(o, configDir, settings); err != nil {
			return nil, err
		}
	case p.canAddConfigDir(o) && p.configDirKeeps(o, main):
		configDir = DefaultConfigDir
		if err := p.addConfigDir(o, configDir); err != nil {
			return nil, err
		}
		if err := p.dropIn(o, configDir, settings); err != nil {
			return nil, err
		}
	case main != nil:
		data, err := main.merge(settings)
		if err != nil {
			return nil, err
		}
		if err := p.change(o, main.path, data, "the kubelet's image service, pull throttle and parallel pulls (merged; a rewrite of this file by kubeadm or a node image update undoes it: run install again)"); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: the kubelet (%s) has no --config file and no --config-dir: give it one, then run install again", ErrRefused, k.ExecStartFile)
	}

	// serve's drop-in: the kubelet's files.
	dropIn, err := p.serveDropIn(serveArgs, configDir)
	if err != nil {
		return nil, err
	}
	if err := p.changeFile(o, Change{Path: ServeDropIn, Data: dropIn, Why: "serve reads the kubelet's files and asks its runtime", Serve: true}); err != nil {
		return nil, err
	}
	for _, f := range o.Files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("file %q: not an absolute path of the node", f.Path)
		}
		if err := p.changeFile(o, Change{Path: f.Path, Data: f.Data, Mode: f.Mode, Why: f.Why, Serve: true, Opaque: f.Opaque}); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// binary plans the copy of o.Binary and returns serve's ExecStart words
// with it, unless serve's unit is the package's.
func (p *Plan) binary(o Options, words []string, packaged bool) ([]string, error) {
	if o.Binary == nil {
		return words, nil
	}
	if packaged {
		p.Notes = append(p.Notes, fmt.Sprintf("serve's units are the package's: its binary %s runs, %s is not copied", words[0], o.Binary.Path))
		return words, nil
	}
	if !path.IsAbs(o.Binary.Path) {
		return nil, fmt.Errorf("pullguard's binary %q: not an absolute path of the node", o.Binary.Path)
	}
	data, err := os.ReadFile(o.Binary.Source)
	if err != nil {
		return nil, fmt.Errorf("pullguard's binary: %w", err)
	}
	if err := p.changeFile(o, Change{Path: o.Binary.Path, Data: data, Mode: 0o755, Why: "pullguard's binary, which serve runs", Serve: true, Opaque: true}); err != nil {
		return nil, err
	}
	words = slices.Clone(words)
	words[0] = o.Binary.Path
	return words, nil
}

// serveArgs sets o.ServeArgs on serve's words.
func serveArgs(words, args []string) ([]string, error) {
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok || name == "" || value == "" {
			return nil, fmt.Errorf("serve flag %q: not --name=value", a)
		}
		words = setFlag(words, name, value)
	}
	return words, nil
}

// units plans serve's units and the kubelet's systemd drop-in from deploy's
// files, unless the package put them under /usr/lib/systemd/system, and
// returns the words of serve's ExecStart.
func (p *Plan) units(o Options) ([]string, error) {
	entries, err := fs.ReadDir(deploy.Files, "systemd")
	if err != nil {
		return nil, fmt.Errorf("deploy files: %w", err)
	}
	var serveUnit []byte
	servePackaged := false
	for _, e := range entries {
		data, err := fs.ReadFile(deploy.Files, "systemd/"+e.Name())
		if err != nil {
			return nil, fmt.Errorf("deploy files: %w", err)
		}
		dest := path.Join(etcUnits, e.Name())
		if rest, ok := strings.CutPrefix(e.Name(), "kubelet-"); ok {
			dest = path.Join(etcUnits, "kubelet.service.d", "20-"+rest)
		} else {
			p.Units = append(p.Units, e.Name())
		}
		rel := strings.TrimPrefix(dest, etcUnits+"/")
		packaged := ""
		for _, dir := range UnitDirs[2:] {
			if b, err := os.ReadFile(hostPath(o.Root, path.Join(dir, rel))); err == nil {
				packaged, data = path.Join(dir, rel), b
				break
			}
		}
		if e.Name() == ServeUnit {
			serveUnit, servePackaged = data, packaged != ""
		}
		if packaged != "" {
			continue
		}
		why, serve := "a unit of pullguard", true
		if strings.HasPrefix(rel, "kubelet.service.d/") {
			why, serve = "the kubelet starts after serve", false
		}
		if err := p.changeFile(o, Change{Path: dest, Data: data, Why: why, Serve: serve}); err != nil {
			return nil, err
		}
	}
	if serveUnit == nil {
		return nil, fmt.Errorf("deploy files: no systemd/%s", ServeUnit)
	}
	words, err := execStart(serveUnit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ServeUnit, err)
	}
	if words, err = p.binary(o, words, servePackaged); err != nil {
		return nil, err
	}
	if words, err = serveArgs(words, o.ServeArgs); err != nil {
		return nil, err
	}
	flags := map[string]Flag{}
	ParseFlags(words[1:], ServeUnit, 0, flags)
	p.ServeSocket, p.Store = defaultServeSocket, defaultStore
	if f, ok := flags["listen"]; ok {
		p.ServeSocket = f.Value
	} else if s := listenStream(o.Root); s != "" {
		p.ServeSocket = "unix://" + s
	}
	if f, ok := flags["root-dir"]; ok {
		p.Store = f.Value
	}
	p.ServeMetrics = flags["metrics-bind-address"].Value
	return words, nil
}

// listenStream is pullguard.socket's ListenStream=, from the package's unit
// or deploy's.
func listenStream(root string) string {
	var data []byte
	for _, dir := range UnitDirs[2:] {
		if b, err := os.ReadFile(hostPath(root, path.Join(dir, "pullguard.socket"))); err == nil {
			data = b
			break
		}
	}
	if data == nil {
		data, _ = fs.ReadFile(deploy.Files, "systemd/pullguard.socket")
	}
	return unitValue(data, "Socket", "ListenStream")
}

// kubeletSettings are deploy's kubelet settings, the image service set to
// serve's socket: the kubelet's containerRuntimeEndpoint stays its own.
func kubeletSettings(serveSocket string) (*yaml.Node, error) {
	data, err := fs.ReadFile(deploy.Files, "kubelet/config-snippet.yaml")
	if err != nil {
		return nil, fmt.Errorf("deploy files: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil, fmt.Errorf("deploy files: kubelet/config-snippet.yaml: %v", err)
	}
	m := doc.Content[0]
	// The snippet's own header says how to use it by hand.
	m.HeadComment = ""
	if len(m.Content) > 0 {
		m.Content[0].HeadComment = ""
	}
	var out []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		switch m.Content[i].Value {
		case "containerRuntimeEndpoint":
			continue
		case "imageServiceEndpoint":
			m.Content[i+1].Value = serveSocket
		}
		out = append(out, m.Content[i], m.Content[i+1])
	}
	m.Content = out
	return m, nil
}

// dropIn plans the kubelet settings as a file of the kubelet's --config-dir.
func (p *Plan) dropIn(o Options, dir string, settings *yaml.Node) error {
	var b bytes.Buffer
	b.WriteString("# Written by `pullguard install`; `pullguard uninstall` removes it.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(settings); err != nil {
		return fmt.Errorf("kubelet drop-in: %w", err)
	}
	return p.change(o, path.Join(dir, KubeletDropIn), b.Bytes(), "the kubelet's image service, pull throttle and parallel pulls")
}

// canAddConfigDir says whether the kubelet takes --config-dir (1.31 and
// later).
func (p *Plan) canAddConfigDir(o Options) bool {
	out, err := o.kubeletVersion(p.Kubelet.Binary)
	if err != nil {
		p.Notes = append(p.Notes, fmt.Sprintf("%s --version did not run (%v): the kubelet's version is unknown, so its configuration file is merged rather than given a --config-dir", p.Kubelet.Binary, err))
		return false
	}
	minor, err := kubeletMinor(out)
	if err != nil {
		p.Notes = append(p.Notes, fmt.Sprintf("%s --version: %v: the kubelet's configuration file is merged rather than given a --config-dir", p.Kubelet.Binary, err))
		return false
	}
	if minor < configDirMinor {
		p.Notes = append(p.Notes, fmt.Sprintf("the kubelet is 1.%d, before --config-dir (1.%d): its configuration file is merged", minor, configDirMinor))
		return false
	}
	return true
}

// change plans writing data at path, unless path holds it already; a
// file that is there keeps its mode.
func (p *Plan) change(o Options, path string, data []byte, why string) error {
	return p.changeFile(o, Change{Path: path, Data: data, Why: why})
}

// changeFile plans c (its Path, Data, Why, Serve and Opaque; its Mode, or
// the mode of the file there, 0644 for a new one when 0).
func (p *Plan) changeFile(o Options, c Change) error {
	path, keepMode := c.Path, c.Mode == 0
	c.Action = Create
	if keepMode {
		c.Mode = 0o644
	}
	old, err := os.ReadFile(hostPath(o.Root, path))
	switch {
	case err == nil:
		c.Old, c.Action = old, Modify
		if fi, err := os.Stat(hostPath(o.Root, path)); err == nil && keepMode {
			c.Mode = fi.Mode().Perm()
		}
		if bytes.Equal(old, c.Data) {
			c.Action = Unchanged
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if i := slices.IndexFunc(p.Changes, func(c Change) bool { return c.Path == path }); i >= 0 {
		p.Changes[i] = c
		return nil
	}
	p.Changes = append(p.Changes, c)
	return nil
}

// KubeletChanged says whether the plan changes a file the kubelet reads:
// then the kubelet restarts, else serve alone.
func (p *Plan) KubeletChanged() bool {
	return slices.ContainsFunc(p.Changes, func(c Change) bool { return c.Action != Unchanged && !c.Serve })
}

// Changed says whether the plan changes any file.
func (p *Plan) Changed() bool {
	return slices.ContainsFunc(p.Changes, func(c Change) bool { return c.Action != Unchanged })
}
