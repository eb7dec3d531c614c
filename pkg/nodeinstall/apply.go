package nodeinstall

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pullguard/pullguard/internal/durable"
)

// Install writes a plan. Before it changes any file, it copies the
// originals of the files it changes under serve's store and writes the
// manifest; then it writes each file with internal/durable, so that a
// crash leaves each file old or new, never a mix, and uninstall can give
// back the old ones. A write that fails gives back the files written
// before it and the manifest as it was: no half install stays. A plan
// that changes nothing writes nothing.
func Install(o Options, p *Plan) (*Manifest, error) {
	m, err := readManifest(o.Root, p.Store)
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = &Manifest{APIVersion: manifestVersion, Kind: manifestKind, Store: p.Store}
	}
	if !p.Changed() {
		return m, nil
	}
	u := &undo{o: o, store: p.Store}
	if u.manifest, err = os.ReadFile(hostPath(o.Root, manifestPath(p.Store))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("install manifest: %w", err)
	}
	addDirs := func(d string) {
		for ; d != "/" && !exists(o.Root, d); d = path.Dir(d) {
			if !slices.Contains(m.Dirs, d) {
				m.Dirs = append(m.Dirs, d)
				u.dirs = append(u.dirs, d)
			}
		}
	}
	addDirs(p.Store)
	if err := os.MkdirAll(hostPath(o.Root, path.Dir(p.Store)), 0o755); err != nil {
		return nil, u.giveBack(fmt.Errorf("serve's store: %w", err))
	}
	for _, c := range p.Changes {
		if c.Action == Unchanged {
			continue
		}
		addDirs(path.Dir(c.Path))
		r := m.record(c.Path)
		if r == nil {
			m.Files = append(m.Files, Record{Path: c.Path})
			r = &m.Files[len(m.Files)-1]
		}
		// A file as an earlier install wrote it keeps that install's
		// original. One that is new, or changed or removed since (kubeadm
		// upgrade rewrote it), is what uninstall gives back now.
		if r.Written == "" || c.Action == Create || hashOf(c.Old) != r.Written {
			earlier := r.Backup
			r.Mode, r.Original, r.Backup = c.Mode, "", ""
			if c.Action == Modify {
				r.Original = hashOf(c.Old)
				r.Backup = path.Join(p.Store, installDir, backupDir, c.Path)
				if earlier != "" {
					// Not over the copy the manifest on disk names until
					// the new one is written.
					r.Backup += "." + r.Original[:12]
				}
				if err := writeFile(o.Root, r.Backup, c.Old, 0o600, 0o700); err != nil {
					return nil, u.giveBack(fmt.Errorf("backup of %s: %w", c.Path, err))
				}
				u.backups = append(u.backups, r.Backup)
			}
		}
		r.Written, r.Opaque = hashOf(c.Data), c.Opaque
	}
	// Parents before children, so that uninstall removes them in reverse.
	byDepth := func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") }
	slices.SortStableFunc(m.Dirs, byDepth)
	slices.SortStableFunc(u.dirs, byDepth)
	m.Units = p.Units
	if err := writeManifest(o.Root, m); err != nil {
		return nil, u.giveBack(err)
	}
	for _, c := range p.Changes {
		if c.Action == Unchanged {
			continue
		}
		if err := writeFile(o.Root, c.Path, c.Data, c.Mode, 0o755); err != nil {
			return nil, u.giveBack(err)
		}
		u.written = append(u.written, c)
	}
	return m, nil
}

// undo is what an Install wrote so far, to give back when it fails.
type undo struct {
	o     Options
	store string
	// manifest is the manifest's bytes before, nil when there was none.
	manifest []byte
	// dirs are the directories this install created, parents first;
	// backups the copies of originals it wrote; written the files.
	dirs    []string
	backups []string
	written []Change
}

// giveBack gives back the files written (removes those created, writes
// the originals of the others), then the manifest as it was (none: the
// install directory goes), the copies written and the directories
// created, and returns cause. A file it cannot give back is in the
// error, and the new manifest stays, for uninstall.
func (u *undo) giveBack(cause error) error {
	root := u.o.Root
	var errs []error
	for i := len(u.written) - 1; i >= 0; i-- {
		c := u.written[i]
		var err error
		if c.Action == Create {
			if err = os.Remove(hostPath(root, c.Path)); errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		} else {
			err = writeFile(root, c.Path, c.Old, c.Mode, 0o755)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("giving back %s: %w", c.Path, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; then %w: `pullguard uninstall` gives back the rest", cause, errors.Join(errs...))
	}
	if u.manifest == nil {
		_ = os.RemoveAll(hostPath(root, path.Join(u.store, installDir)))
	} else {
		if err := durable.WriteFile(hostPath(root, manifestPath(u.store)), u.manifest, manifestFileMode); err != nil {
			return fmt.Errorf("%w; the files written are given back, but not the manifest: %w", cause, err)
		}
		for _, b := range u.backups {
			_ = os.Remove(hostPath(root, b))
		}
	}
	removeDirs(root, u.dirs)
	return fmt.Errorf("%w: the files install wrote before are given back", cause)
}

// writeFile writes a node's file atomically, creating its directory.
func writeFile(root, p string, data []byte, mode, dirMode fs.FileMode) error {
	h := hostPath(root, p)
	if err := os.MkdirAll(filepath.Dir(h), dirMode); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	if err := durable.WriteFile(h, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return nil
}

func exists(root, p string) bool {
	_, err := os.Lstat(hostPath(root, p))
	return err == nil
}

// Installed says whether the node holds the manifest of an install.
func Installed(o Options) (bool, error) {
	m, err := readManifest(o.Root, StoreOf(o.Root))
	return m != nil, err
}

// UninstallPlan is what uninstall does.
type UninstallPlan struct {
	Manifest *Manifest
	Changes  []Change
	// KeepRecords keeps serve's store (its records); the manifest and the
	// copies of the originals go unless a file is kept.
	KeepRecords bool
}

// ErrNotInstalled is returned by PlanUninstall on a node with no manifest
// of an install.
var ErrNotInstalled = errors.New("no install of pullguard to take back")

// PlanUninstall reads the manifest of the install and the files as they
// are now: a file install wrote that is as install wrote it is given back
// (removed, or its original restored); one that changed since is kept, and
// said so.
func PlanUninstall(o Options, keepRecords bool) (*UninstallPlan, error) {
	store := StoreOf(o.Root)
	m, err := readManifest(o.Root, store)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("%w: %s is missing", ErrNotInstalled, manifestPath(store))
	}
	u := &UninstallPlan{Manifest: m, KeepRecords: keepRecords}
	for i := len(m.Files) - 1; i >= 0; i-- {
		r := m.Files[i]
		cur, err := os.ReadFile(hostPath(o.Root, r.Path))
		missing := errors.Is(err, fs.ErrNotExist)
		if err != nil && !missing {
			return nil, fmt.Errorf("reading %s: %w", r.Path, err)
		}
		c := Change{Path: r.Path, Old: cur, Mode: r.Mode, Opaque: r.Opaque}
		switch {
		case r.Original == "" && missing:
			c.Action, c.Why = Unchanged, "already removed"
		case r.Original == "" && hashOf(cur) == r.Written:
			c.Action, c.Why = Remove, "install created it"
		case r.Original != "" && !missing && hashOf(cur) == r.Original:
			c.Action, c.Why = Unchanged, "already as it was before install"
		case r.Original != "" && (missing || hashOf(cur) == r.Written):
			orig, err := os.ReadFile(hostPath(o.Root, r.Backup))
			if err != nil {
				return nil, fmt.Errorf("the copy of %s from before install: %w", r.Path, err)
			}
			if hashOf(orig) != r.Original {
				return nil, fmt.Errorf("the copy of %s from before install (%s) is not what install copied", r.Path, r.Backup)
			}
			c.Action, c.Data, c.Why = Restore, orig, "as it was before install"
		default:
			c.Action, c.Why = Kept, "changed since install: left as it is"
			if r.Backup != "" {
				c.Why += "; the original is " + r.Backup
			}
		}
		u.Changes = append(u.Changes, c)
	}
	return u, nil
}

// Kept says whether uninstall leaves a file install wrote.
func (u *UninstallPlan) Kept() bool {
	return slices.ContainsFunc(u.Changes, func(c Change) bool { return c.Action == Kept })
}

// Uninstall gives back the files of the plan, removes the directories
// install created (when empty), the links that enabled its units, and
// serve's store (unless KeepRecords: then the manifest only). When a file
// is kept, the manifest and the copies of the originals stay.
func Uninstall(o Options, u *UninstallPlan) error {
	var errs []error
	for _, c := range u.Changes {
		switch c.Action {
		case Remove:
			if err := os.Remove(hostPath(o.Root, c.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing %s: %w", c.Path, err))
			}
		case Restore:
			if err := writeFile(o.Root, c.Path, c.Data, c.Mode, 0o755); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// The temporary files of a write a crash interrupted.
	for _, r := range u.Manifest.Files {
		dir, base := path.Split(r.Path)
		entries, _ := os.ReadDir(hostPath(o.Root, dir))
		for _, e := range entries {
			if durable.IsTemp(e.Name()) && strings.HasPrefix(e.Name(), "."+base+".tmp-") {
				_ = os.Remove(hostPath(o.Root, path.Join(dir, e.Name())))
			}
		}
	}
	for _, name := range u.Manifest.Units {
		unitFile := path.Join(etcUnits, name)
		if u.Manifest.record(unitFile) == nil {
			continue // the package's: its links are the operator's
		}
		links, _ := filepath.Glob(hostPath(o.Root, path.Join(etcUnits, "*.wants", name)))
		more, _ := filepath.Glob(hostPath(o.Root, path.Join(etcUnits, "*.requires", name)))
		for _, l := range append(links, more...) {
			if fi, err := os.Lstat(l); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				if err := os.Remove(l); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) > 0 || u.Kept() {
		removeDirs(o.Root, u.Manifest.Dirs)
		return errors.Join(errs...)
	}
	dir := path.Join(u.Manifest.Store, installDir)
	if !u.KeepRecords {
		dir = u.Manifest.Store
	}
	if err := os.RemoveAll(hostPath(o.Root, dir)); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	removeDirs(o.Root, u.Manifest.Dirs)
	return nil
}

// removeDirs removes the directories install created, children first,
// each only when empty: what others put there stays.
func removeDirs(root string, dirs []string) {
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(hostPath(root, dirs[i]))
	}
}

// StoreOf is serve's --root-dir as its unit (and install's drop-in) give
// it under root, else the default.
func StoreOf(root string) string {
	for _, f := range []string{ServeDropIn, path.Join(UnitDirs[0], ServeUnit), path.Join(UnitDirs[2], ServeUnit), path.Join(UnitDirs[3], ServeUnit)} {
		data, err := os.ReadFile(hostPath(root, f))
		if err != nil {
			continue
		}
		words, err := execStart(data)
		if err != nil {
			continue
		}
		flags := map[string]Flag{}
		ParseFlags(words[1:], f, 0, flags)
		if d := flags["root-dir"].Value; d != "" {
			return d
		}
		return defaultStore
	}
	return defaultStore
}
