package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// procEnv is a process's HOME ("" for none) and working directory as
// systemd gives them: where it searches the node's docker credentials.
type procEnv struct {
	home, workDir string
	// from says where home comes from; where is the unit line that gives
	// it ("" when none does).
	from, where string
}

func (e procEnv) describe() string {
	s := "no HOME"
	if e.home != "" {
		s = "HOME=" + e.home
	}
	if e.from != "" {
		s += " (" + e.from + ")"
	}
	if e.workDir != "/" {
		s += ", working directory " + e.workDir
	}
	return s
}

// kubeletEnv is the kubelet's HOME and working directory from its unit
// under the host root (nodeinstall.Discover); without a kubelet.service,
// systemd's defaults for a unit without User=: no HOME, /.
func (o *doctorOptions) kubeletEnv() procEnv {
	kl, err := nodeinstall.Discover(firstNonEmpty(o.hostRoot, "/"))
	if err != nil {
		return procEnv{workDir: "/", from: "no kubelet.service read: systemd's default, no User= and no Environment=HOME="}
	}
	e := procEnv{home: kl.Home, workDir: kl.WorkDir, where: kl.HomeFrom.Where()}
	switch {
	case kl.Home == "":
		e.from = "its unit has no User= and no Environment=HOME="
	default:
		e.from = kl.HomeFrom.Where()
	}
	return e
}

// environment is serve's HOME and working directory as its unit and
// drop-ins give them: Environment=HOME= (the last wins), else the home of
// User=, else none; WorkingDirectory=, "/" by default.
func (u *serveUnit) environment(hostRoot string) (procEnv, error) {
	e := procEnv{workDir: "/", from: "its unit has no User= and no Environment=HOME="}
	if s, ok := u.last("User"); ok && s.value != "" {
		h, err := nodeinstall.UserHome(firstNonEmpty(hostRoot, "/"), s.value)
		if err != nil {
			return e, fmt.Errorf("%s: User=%s: %w", s.where(), s.value, err)
		}
		e.home, e.from, e.where = h, s.where()+": User="+s.value, s.where()
	}
	for _, s := range u.settings["Environment"] {
		words, err := nodeinstall.SplitCommandLine(s.value)
		if err != nil {
			return e, fmt.Errorf("%s: Environment=: %w", s.where(), err)
		}
		for _, w := range words {
			if v, ok := strings.CutPrefix(w, "HOME="); ok {
				e.home, e.from, e.where = v, s.where()+": Environment=HOME="+v, s.where()
			}
		}
	}
	if s, ok := u.last("WorkingDirectory"); ok && s.value != "" {
		switch d := strings.TrimPrefix(s.value, "-"); d {
		case "~":
			if e.home != "" {
				e.workDir = e.home
			} else {
				e.workDir = "/root"
			}
		default:
			e.workDir = d
		}
	}
	return e, nil
}

// fix is how to give serve the kubelet's HOME and working directory k.
func (e procEnv) fix(k procEnv, u *serveUnit) string {
	var lines []string
	switch {
	case k.home == "" && e.home != "":
		lines = append(lines, fmt.Sprintf("remove %s (the kubelet has no HOME, and serve's own unit gives none)", e.from))
	case k.home != e.home:
		lines = append(lines, fmt.Sprintf("add `Environment=HOME=%s` to [Service] in %s", k.home, serveDropInPath(u)))
	}
	if k.workDir != e.workDir {
		lines = append(lines, fmt.Sprintf("set `WorkingDirectory=%s` in %s", k.workDir, serveDropInPath(u)))
	}
	return "run `pullguard install` again (its drop-in gives serve the kubelet's HOME and working directory), or " +
		strings.Join(lines, " and ") + ", then systemctl daemon-reload && systemctl restart pullguard"
}

// serveDropInPath is install's drop-in of serve's unit: in
// /etc/systemd/system for a unit in systemd's directories, else beside it.
func serveDropInPath(u *serveUnit) string {
	if len(u.files) == 0 {
		return nodeinstall.ServeDropIn
	}
	dir := filepath.Dir(u.files[0])
	for _, d := range nodeinstall.UnitDirs {
		if strings.HasSuffix(dir, d) {
			return nodeinstall.ServeDropIn
		}
	}
	return u.files[0] + ".d/20-kubelet.conf"
}
