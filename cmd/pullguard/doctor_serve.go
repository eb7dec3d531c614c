package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// readServeUnit reads serve's unit (--serve-unit, else pullguard.service in
// systemd's directories) for serve's flags and sandbox. Without one,
// doctor cannot compare serve's flags with the kubelet's: a warning.
func (o *doctorOptions) readServeUnit(add func(severity, check, what, fix string)) *serveUnit {
	path, dropins := findServeUnit(o.hostRoot, o.serveUnit)
	if path == "" {
		where := "in " + strings.Join(serveUnitDirs, ", ")
		if o.serveUnit != "" {
			where = "at " + o.serveUnit
		}
		add(severityWarning, "serve-unit", fmt.Sprintf("no %s %s: serve's runtime, credential-provider flags and sandbox are not compared with the kubelet's", serveUnitName, where),
			"give doctor serve's unit with --serve-unit")
		return nil
	}
	u, err := readServeUnit(path, dropins)
	if err != nil {
		add(severityProblem, "serve-unit", err.Error(), "serve's unit must run `pullguard serve` with flags serve accepts (pullguard serve --help)")
		return nil
	}
	add(severityOK, "serve-unit", fmt.Sprintf("serve's flags and sandbox read from %s", strings.Join(u.files, ", ")), "")
	return u
}

// serveTargets are where doctor reaches serve: doctor's options when given,
// else serve's unit's flags, else the defaults.
type serveTargets struct{ socket, metrics, rootDir string }

func (o *doctorOptions) serveTargets(u *serveUnit) serveTargets {
	t := serveTargets{socket: o.serveSocket, metrics: o.serveMetrics, rootDir: o.rootDir}
	if u == nil {
		return t
	}
	pick := func(opt, flag string, v *string) {
		if !o.set[opt] && u.flags[flag] != "" {
			*v = u.flags[flag]
		}
	}
	pick("serve-socket", "listen", &t.socket)
	pick("serve-metrics-address", "metrics-bind-address", &t.metrics)
	pick("root-dir", "root-dir", &t.rootDir)
	return t
}

// checkServeFlags compares serve's unit with the kubelet: the runtime
// serve forwards to, the credential-provider flags, and the node's
// credential files the unit's sandbox hides from serve.
func checkServeFlags(k *kubeletView, u *serveUnit, hostRoot string, add func(severity, check, what, fix string)) {
	checkRuntimeEndpoint(k, u, add)
	checkCredentialProviders(k, u, add)
	checkNodeCredentials(k, u, hostRoot, add)
}

func checkRuntimeEndpoint(k *kubeletView, u *serveUnit, add func(severity, check, what, fix string)) {
	kubelet := kubeletRuntime(k)
	serve := u.flags["image-service-endpoint"]
	want, _ := criruntime.ParseEndpoint(kubelet)
	if serve == "" || serve == EmbeddedEndpoint {
		add(severityProblem, "runtime-endpoint", fmt.Sprintf("serve pulls into its embedded runtime, the kubelet runs containers on %s: the kubelet's runtime never has serve's images", want),
			fmt.Sprintf("%s: set `--image-service-endpoint %s`, then systemctl daemon-reload && systemctl restart pullguard", u.flagWhere("image-service-endpoint"), want))
		return
	}
	got, _ := criruntime.ParseEndpoint(serve)
	if got != want {
		add(severityProblem, "runtime-endpoint", fmt.Sprintf("serve forwards images to %s, the kubelet runs containers on %s (its containerRuntimeEndpoint): pulls land in another runtime than the one that starts the containers", got, want),
			fmt.Sprintf("%s: set `--image-service-endpoint %s`, then systemctl daemon-reload && systemctl restart pullguard", u.flagWhere("image-service-endpoint"), want))
		return
	}
	add(severityOK, "runtime-endpoint", fmt.Sprintf("serve forwards images to the kubelet's runtime, %s", want), "")
}

// checkCredentialProviders compares the kubelet's credential-provider
// flags with serve's, both ways: serve reads the same plugins to tell the
// node's credentials from a pod's.
func checkCredentialProviders(k *kubeletView, u *serveUnit, add func(severity, check, what, fix string)) {
	problems := 0
	for _, name := range []string{"image-credential-provider-config", "image-credential-provider-bin-dir"} {
		kf, kset := k.flags[name]
		sv, sset := u.flags[name], u.set[name] && u.flags[name] != ""
		kset = kset && kf.value != ""
		switch {
		case kset && !sset:
			problems++
			add(severityProblem, "credential-providers", fmt.Sprintf("the kubelet has --%s=%s (%s), serve has none: images pulled with the plugins' node credentials are filed as a pod's, and serve tells other pods to verify them", name, kf.value, kf.where()),
				fmt.Sprintf("%s: add `--%s %s` to ExecStart, then systemctl daemon-reload && systemctl restart pullguard", u.exec.where(), name, kf.value))
		case !kset && sset:
			problems++
			add(severityProblem, "credential-providers", fmt.Sprintf("serve has --%s %s, the kubelet has none: serve counts the plugins' credentials as the node's, which the kubelet never uses, and lets every pod use the images pulled with them", name, sv),
				fmt.Sprintf("%s: remove `--%s %s` from ExecStart (or give the kubelet the same flag), then systemctl daemon-reload && systemctl restart pullguard", u.flagWhere(name), name, sv))
		case kset && filepath.Clean(kf.value) != filepath.Clean(sv):
			problems++
			add(severityProblem, "credential-providers", fmt.Sprintf("the kubelet has --%s=%s (%s), serve has %s", name, kf.value, kf.where(), sv),
				fmt.Sprintf("%s: set `--%s %s`, then systemctl daemon-reload && systemctl restart pullguard", u.flagWhere(name), name, kf.value))
		}
	}
	if problems > 0 {
		return
	}
	if f, ok := k.flags["image-credential-provider-config"]; ok && f.value != "" {
		add(severityOK, "credential-providers", fmt.Sprintf("serve and the kubelet use the same credential providers (%s)", f.value), "")
		return
	}
	add(severityOK, "credential-providers", "neither serve nor the kubelet uses credential-provider plugins", "")
}

// checkNodeCredentials finds the node credential file the kubelet reads
// (the first one present in its search, with its HOME and working
// directory), tells whether serve, with its own HOME and working directory,
// reads another one, and whether serve's sandbox hides it: serve then files
// images pulled with it as a pod's. Paths are the node's, read under
// hostRoot.
func checkNodeCredentials(k *kubeletView, u *serveUnit, hostRoot string, add func(severity, check, what, fix string)) {
	rootDir := "/var/lib/kubelet"
	if f, ok := k.flags["root-dir"]; ok && f.value != "" {
		rootDir = f.value
	}
	exists := func(f string) bool {
		_, err := os.Stat(filepath.Join(firstNonEmpty(hostRoot, "/"), f))
		return err == nil
	}
	first := func(env procEnv) string {
		for _, f := range keyring.NodeConfigFiles(rootDir, env.home, env.workDir) {
			if exists(f) {
				return f
			}
		}
		return ""
	}
	kenv := k.env
	kf := first(kenv)
	senv, err := u.environment(hostRoot)
	if err != nil {
		add(severityProblem, "node-credentials", fmt.Sprintf("serve's HOME: %v", err), "")
		return
	}
	if sf := first(senv); sf != kf && (senv.home != kenv.home || senv.workDir != kenv.workDir) {
		what := fmt.Sprintf("serve searches the node's docker credentials with %s, the kubelet with %s: ", senv.describe(), kenv.describe())
		if sf != "" {
			what += fmt.Sprintf("serve takes %s for the node's credentials", sf)
			if kf == "" {
				what += ", the kubelet reads none: a pod whose pull secret is that account's gets its images filed as every pod's"
			} else {
				what += fmt.Sprintf(", the kubelet reads %s", kf)
			}
		} else {
			what += fmt.Sprintf("the kubelet reads the node's credentials from %s, serve finds none: images pulled with them are filed as a pod's", kf)
		}
		add(severityProblem, "node-credentials", what, senv.fix(kenv, u))
		return
	}
	if kf == "" {
		what := "the node has no docker credentials file (config.json, .dockercfg) in the kubelet's search"
		if kenv.home == "" && exists("/root/.docker/config.json") {
			what = "the kubelet does not read /root/.docker/config.json: it has no HOME (" + kenv.from + "); no other docker credentials file is in its search"
		}
		add(severityOK, "node-credentials", what, "")
		return
	}
	homes := []string{"/root", "/home", "/run/user"}
	if kenv.home != "" {
		homes = append(homes, kenv.home)
	}
	if by, fix, hidden := u.hides(kf, homes); hidden {
		add(severityProblem, "node-credentials", fmt.Sprintf("the kubelet reads the node's credentials from %s, which serve's sandbox hides (%s): images pulled with them are filed as a pod's", kf, by),
			fix+", then systemctl daemon-reload && systemctl restart pullguard")
		return
	}
	if filepath.Clean(rootDir) != filepath.Clean(u.flags["kubelet-root-dir"]) && under(kf, rootDir) {
		add(severityProblem, "node-credentials", fmt.Sprintf("the kubelet reads the node's credentials from %s, under its --root-dir, which serve's --kubelet-root-dir (%s) is not", kf, u.flags["kubelet-root-dir"]),
			fmt.Sprintf("%s: add `--kubelet-root-dir %s` to ExecStart", u.exec.where(), rootDir))
		return
	}
	add(severityOK, "node-credentials", fmt.Sprintf("serve can read the node's credentials the kubelet reads, %s", kf), "")
}
