package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/featuregates"
	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// suggestedMaxParallelImagePulls is deploy/kubelet/config-snippet.yaml's.
const suggestedMaxParallelImagePulls = 10

// defaultMaxPods is the kubelet's default maxPods.
const defaultMaxPods = 110

// kubeletView is the kubelet's configuration as the kubelet reads it: its
// file, its --config-dir drop-ins merged over it, then the flags of its
// flags files over them; or, when doctor can read it, its /configz.
type kubeletView struct {
	path   string // its --config
	dir    string // its --config-dir, "" for none
	source string // what the configuration was read from
	cfg    *kubeletconfig.KubeletConfiguration
	// origins gives the file that sets each top-level field.
	origins map[string]string
	flags   map[string]kubeletFlag
	// files is the configuration of its files, when cfg is its /configz.
	files *kubeletconfig.KubeletConfiguration
	// env is its HOME and working directory, where it searches the
	// node's docker credentials.
	env procEnv
}

// checkKubeletFileKeeps warns when serve's socket is set in the kubelet's
// --config file itself (install merged it there: an older kubelet, or one
// without a --config-dir), which kubeadm and node images rewrite.
func checkKubeletFileKeeps(k *kubeletView, add func(severity, check, what, fix string)) {
	if _, ok := k.flags["image-service-endpoint"]; ok || k.path == "" || k.origins == nil || k.origins["imageServiceEndpoint"] != k.path {
		return
	}
	add(severityWarning, "kubelet-config-rewrite",
		fmt.Sprintf("serve's image service is set in %s itself, which `kubeadm upgrade node` (from the kubelet-config ConfigMap) or a node image update rewrites: serve would be out of the path with nothing said but this check and serve's silence", k.path),
		"after such an upgrade run `pullguard install` again; a kubelet 1.31 or later keeps the settings in a --config-dir drop-in, which install gives it when it can")
}

// fix names where to set a setting: the flags file line that gives flag,
// which wins, else the configuration file's field.
func (k *kubeletView) fix(flag, flagValue, field, fieldValue string) string {
	if f, ok := k.flags[flag]; ok {
		return fmt.Sprintf("%s: set `--%s=%s`", f.where(), flag, flagValue)
	}
	return k.fixField(field, fmt.Sprintf("set `%s: %s`", field, fieldValue))
}

// fixField names the file and line that set field (the last drop-in
// setting it wins), else where to add it: a drop-in when the kubelet has a
// --config-dir, its file otherwise.
func (k *kubeletView) fixField(field, change string) string {
	if file, ok := k.origins[field]; ok {
		if n := fieldLine(file, field); n > 0 {
			return fmt.Sprintf("%s:%d: %s", file, n, change)
		}
		return fmt.Sprintf("%s: %s", file, change)
	}
	add := strings.Replace(change, "set ", "add ", 1)
	if k.dir != "" {
		return fmt.Sprintf("%s: %s (a drop-in of the kubelet's --config-dir, with apiVersion and kind; *.conf files are merged in name order)", filepath.Join(k.dir, nodeinstall.KubeletDropIn), add)
	}
	return fmt.Sprintf("%s: %s", k.path, add)
}

var topField = regexp.MustCompile(`^"?([A-Za-z]+)"?\s*:`)

// fieldLine is the line of file that sets the top-level field, 0 if none
// is found.
func fieldLine(file, field string) int {
	data, err := boundedread.ReadFile(file, nodeconfig.MaxFileBytes)
	if err != nil {
		return 0
	}
	line := 0
	for i, l := range strings.Split(string(data), "\n") {
		if m := topField.FindStringSubmatch(l); m != nil && m[1] == field {
			line = i + 1
		}
	}
	return line
}

func (o *doctorOptions) check(ctx context.Context) doctorDoc {
	doc := doctorDoc{APIVersion: RunAPIVersion, Kind: "DoctorReport", Findings: []finding{}}
	add := func(severity, check, what, fix string) {
		doc.Findings = append(doc.Findings, finding{Severity: severity, Check: check, What: what, Fix: fix})
		switch severity {
		case severityProblem:
			doc.Problems++
		case severityWarning:
			doc.Warnings++
		}
	}
	unit := o.readServeUnit(add)
	t := o.serveTargets(unit)
	k, err := o.readKubelet(ctx, add)
	if err != nil {
		add(severityProblem, "kubelet-config", err.Error(), "give doctor the kubelet's file with --kubelet-config, its drop-in directory with --kubelet-config-dir, its flags files with --kubelet-flags-files")
	} else {
		checkKubelet(k, t.socket, add)
	}
	runtime := ""
	if k != nil {
		runtime = kubeletRuntime(k)
	}
	if unit != nil {
		runtime = unit.flags["image-service-endpoint"]
		if k != nil {
			checkServeFlags(k, unit, o.hostRoot, add)
		}
	}
	runtimeUp := o.checkRuntime(ctx, runtime, add)
	answers, listening := o.checkServeAnswers(ctx, t.socket, runtime, runtimeUp, add)
	alive, protecting := o.checkProtection(ctx, t.metrics, runtime, runtimeUp, add)
	o.checkStore(t.rootDir, listening || alive, answers && protecting, add)
	return doc
}

// readKubelet reads the kubelet's configuration: its /configz when doctor
// has a --kubeconfig and the API server answers, else its files (its
// --config, its --config-dir drop-ins merged as the kubelet merges them,
// its flags over them).
func (o *doctorOptions) readKubelet(ctx context.Context, add func(severity, check, what, fix string)) (*kubeletView, error) {
	flags, err := o.kubeletFlags()
	if err != nil {
		return nil, err
	}
	k := &kubeletView{path: o.kubeletConfig, dir: o.kubeletConfigDir, flags: flags, env: o.kubeletEnv()}
	if f, ok := flags["config"]; ok && !o.set["kubelet-config"] {
		k.path = filepath.Join(firstNonEmpty(o.hostRoot, "/"), f.value)
	}
	if f, ok := flags["config-dir"]; ok && !o.set["kubelet-config-dir"] {
		k.dir = filepath.Join(firstNonEmpty(o.hostRoot, "/"), f.value)
	}
	kc, err := nodeconfig.LoadKubeletConfigDir(k.path, k.dir, kubeletFlagGateOn(flags))
	if err != nil {
		return nil, err
	}
	k.origins = kc.Origins
	k.source = k.path
	if k.dir != "" {
		k.source = fmt.Sprintf("%s with the %d drop-in(s) of %s", k.path, len(kc.Files)-1, k.dir)
	}
	cfg, errs := applyKubeletFlags(kc.KubeletConfiguration, flags)
	if o.kubeconfig != "" {
		k.files = cfg
		live, from, err := o.readConfigz(ctx, flags)
		if err != nil {
			add(severityWarning, "kubelet-configz", fmt.Sprintf("the kubelet's /configz cannot be read (%v): doctor reads its files instead, which it may not have been restarted with", err),
				"give doctor a --kubeconfig allowed to get nodes/proxy, and the node's --node-name")
		} else {
			k.source = "its /configz through " + from
			if a, b := firstNonEmpty(live.ImageServiceEndpoint, live.ContainerRuntimeEndpoint), firstNonEmpty(cfg.ImageServiceEndpoint, cfg.ContainerRuntimeEndpoint); a != b {
				add(severityWarning, "kubelet-configz", fmt.Sprintf("the kubelet runs with the image service %s, its files now give %s: it has not been restarted since they changed", a, b),
					"systemctl restart kubelet, once serve answers")
			}
			cfg, errs = live, nil
		}
	}
	k.cfg = cfg
	return k, errors.Join(errs...)
}

// kubeletFlags returns the kubelet's flags: those of its flags files when
// --kubelet-flags-files is given; else those of its command line as
// systemd starts it (kubelet.service, its drop-ins, Environment= and
// EnvironmentFile=, expanded), which holds the flags files' too; else,
// with no kubelet.service, those of the default flags files.
func (o *doctorOptions) kubeletFlags() (map[string]kubeletFlag, error) {
	if !o.set["kubelet-flags-files"] {
		if kl, err := nodeinstall.Discover(firstNonEmpty(o.hostRoot, "/")); err == nil {
			out := make(map[string]kubeletFlag, len(kl.Flags))
			for name, f := range kl.Flags {
				out[name] = kubeletFlag{value: f.Value, file: f.File, line: f.Line}
			}
			return out, nil
		}
	}
	return readKubeletFlags(o.flagsFiles)
}

// kubeletFlagGateOn is the kubelet's KubeletEnsureSecretPulledImages gate
// as its --feature-gates flag sets it: on unless the flag turns it off.
func kubeletFlagGateOn(flags map[string]kubeletFlag) bool {
	f, ok := flags["feature-gates"]
	if !ok {
		return true
	}
	on := true
	for _, kv := range strings.Split(f.value, ",") {
		gate, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		if b, err := strconv.ParseBool(v); err == nil && gate == string(featuregates.EnsureSecretPulledImages) {
			on = b
		}
	}
	return on
}

// applyKubeletFlags sets the flags doctor reads over the kubelet's
// configuration, which they override as on the kubelet.
func applyKubeletFlags(in *kubeletconfig.KubeletConfiguration, flags map[string]kubeletFlag) (*kubeletconfig.KubeletConfiguration, []error) {
	cfg := in.DeepCopy()
	var errs []error
	for name, f := range flags {
		switch name {
		case "image-service-endpoint":
			cfg.ImageServiceEndpoint = f.value
		case "container-runtime-endpoint":
			cfg.ContainerRuntimeEndpoint = f.value
		case "registry-qps", "registry-burst":
			n, err := strconv.ParseInt(f.value, 10, 32)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: --%s=%q: not a number", f.where(), name, f.value))
				continue
			}
			if name == "registry-qps" {
				cfg.RegistryPullQPS = ptr.To(int32(n))
			} else {
				cfg.RegistryBurst = int32(n)
			}
		case "serialize-image-pulls":
			b, err := strconv.ParseBool(f.value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: --%s=%q: not a boolean", f.where(), name, f.value))
				continue
			}
			cfg.SerializeImagePulls = &b
		case "feature-gates":
			if cfg.FeatureGates == nil {
				cfg.FeatureGates = map[string]bool{}
			}
			for _, kv := range strings.Split(f.value, ",") {
				gate, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
				if b, err := strconv.ParseBool(v); err == nil {
					cfg.FeatureGates[gate] = b
				}
			}
		}
	}
	return cfg, errs
}

// kubeletRuntime is the kubelet's container runtime endpoint, with the
// kubelet's default.
func kubeletRuntime(k *kubeletView) string {
	return firstNonEmpty(k.cfg.ContainerRuntimeEndpoint, defaultRuntimeEndpoint)
}

// defaultRuntimeEndpoint is the kubelet's default containerRuntimeEndpoint.
const defaultRuntimeEndpoint = "unix:///run/containerd/containerd.sock"

// checkKubelet checks the kubelet's settings: its image service, the
// verification settings its gate allows, its pull throttle and serialization.
func checkKubelet(k *kubeletView, serveSocket string, add func(severity, check, what, fix string)) {
	cfg := k.cfg
	want, _ := criruntime.ParseEndpoint(serveSocket)
	image := firstNonEmpty(cfg.ImageServiceEndpoint, cfg.ContainerRuntimeEndpoint)
	got, _ := criruntime.ParseEndpoint(image)
	switch {
	case image == "":
		add(severityProblem, "image-service-endpoint", "the kubelet sets no image service: it asks the runtime, not serve",
			k.fix("image-service-endpoint", want, "imageServiceEndpoint", want))
	case got != want && k.files != nil && filesGive(k.files, want):
		add(severityProblem, "image-service-endpoint", fmt.Sprintf("the kubelet asks %s for images, not serve's %s: serve protects nothing", image, want),
			"the kubelet's files already give serve's socket: systemctl restart kubelet")
	case got != want:
		add(severityProblem, "image-service-endpoint", fmt.Sprintf("the kubelet asks %s for images, not serve's %s: serve protects nothing", image, want),
			k.fix("image-service-endpoint", want, "imageServiceEndpoint", want))
	default:
		add(severityOK, "image-service-endpoint", fmt.Sprintf("the kubelet asks serve (%s) for images", want), "")
		checkKubeletFileKeeps(k, add)
	}

	// The kubelet's own gate: the policy and allowlist must not be set
	// with it off, or the kubelet refuses to start.
	mine, _ := featuregates.Split(cfg.FeatureGates)
	gates, err := featuregates.Parse(mine, "")
	rejected := false
	if err == nil && !gates.EnsureSecretPulledImages {
		for _, field := range []string{"imagePullCredentialsVerificationPolicy", "preloadedImagesVerificationAllowlist"} {
			set := (field == "imagePullCredentialsVerificationPolicy" && cfg.ImagePullCredentialsVerificationPolicy != "") ||
				(field == "preloadedImagesVerificationAllowlist" && len(cfg.PreloadedImagesVerificationAllowlist) > 0)
			if set {
				rejected = true
				add(severityProblem, "kubelet-config", fmt.Sprintf("the kubelet's KubeletEnsureSecretPulledImages gate is off and %s is set: the kubelet refuses to start", field),
					k.fixField(field, fmt.Sprintf("remove `%s` (serve takes the policy on its own command line, --image-pull-credentials-verification-policy)", field)))
			}
		}
		cfg = ptr.To(*cfg)
		cfg.ImagePullCredentialsVerificationPolicy, cfg.PreloadedImagesVerificationAllowlist = "", nil
	}
	s, err := nodeconfig.ResolveSettings(cfg, nodeconfig.Flags{})
	if err != nil {
		add(severityProblem, "kubelet-config", "the kubelet rejects its configuration: "+err.Error(), k.source)
		return
	}
	if !rejected {
		add(severityOK, "kubelet-config", fmt.Sprintf("the kubelet accepts its configuration, read from %s (its own KubeletEnsureSecretPulledImages gate is %s; serve protects either way)", k.source, onOff(gates.EnsureSecretPulledImages)), "")
	}

	maxPods := int32(defaultMaxPods)
	if cfg.MaxPods > 0 {
		maxPods = cfg.MaxPods
	}
	switch {
	case s.RegistryPullQPS == 0:
		add(severityOK, "pull-throttle", "registryPullQPS is 0: the kubelet does not throttle serve's answered pulls", "")
	case int32(s.RegistryBurst) >= maxPods:
		add(severityWarning, "pull-throttle", fmt.Sprintf("registryPullQPS is %v with a burst of %d: more than %d container starts of hidden images at once fail with \"pull QPS exceeded\"", s.RegistryPullQPS, s.RegistryBurst, s.RegistryBurst),
			k.fix("registry-qps", "0", "registryPullQPS", "0"))
	default:
		add(severityProblem, "pull-throttle", fmt.Sprintf("registryPullQPS is %v with a burst of %d, below maxPods (%d): after a reboot, starts of hidden images beyond %d fail with \"pull QPS exceeded\"", s.RegistryPullQPS, s.RegistryBurst, maxPods, s.RegistryBurst),
			k.fix("registry-qps", "0", "registryPullQPS", "0"))
	}
	switch {
	case s.SerializeImagePulls:
		fix := k.fix("serialize-image-pulls", "false", "serializeImagePulls", "false")
		if _, ok := k.flags["serialize-image-pulls"]; !ok {
			fix += fmt.Sprintf(" and `maxParallelImagePulls: %d`", suggestedMaxParallelImagePulls)
		}
		add(severityProblem, "pull-serialization", "serializeImagePulls is true: serve's answers, which take milliseconds, queue behind every download", fix)
	case s.MaxParallelImagePulls == 0:
		add(severityOK, "pull-serialization", "pulls run in parallel, with no bound (maxParallelImagePulls unset)", "")
	default:
		add(severityOK, "pull-serialization", fmt.Sprintf("pulls run in parallel, at most %d at once", s.MaxParallelImagePulls), "")
	}
}

// filesGive tells whether the kubelet's files give want as its image
// service.
func filesGive(files *kubeletconfig.KubeletConfiguration, want string) bool {
	got, _ := criruntime.ParseEndpoint(firstNonEmpty(files.ImageServiceEndpoint, files.ContainerRuntimeEndpoint))
	return got == want
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// checkServeAnswers asks serve's socket for ImageFsInfo, which serve
// forwards to its runtime (runtime, up or not). listening is whether a
// process listens on the socket: serve, even when it cannot answer.
func (o *doctorOptions) checkServeAnswers(ctx context.Context, socket, runtime string, runtimeUp bool, add func(severity, check, what, fix string)) (answers, listening bool) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	svc, err := criruntime.NewRemote(ctx, o.onHost(socket), o.timeout)
	if err == nil {
		defer svc.Close(context.WithoutCancel(ctx))
		add(severityOK, "serve-answers", fmt.Sprintf("serve answers the CRI image service on %s", socket), "")
		return true, true
	}
	if ep, perr := criruntime.ParseEndpoint(o.onHost(socket)); perr == nil {
		var d net.Dialer
		if c, derr := d.DialContext(ctx, "unix", strings.TrimPrefix(ep, "unix://")); derr == nil {
			c.Close()
			listening = true
		}
	}
	switch {
	case listening && !runtimeUp:
		add(severityProblem, "serve-answers", fmt.Sprintf("serve listens on %s but cannot answer while its runtime (%s) is down", socket, runtime),
			"start the runtime (see the runtime finding); serve needs no restart")
	case listening:
		add(severityProblem, "serve-answers", fmt.Sprintf("serve listens on %s but does not answer ImageFsInfo: %v", socket, err),
			"journalctl -u pullguard: serve logs why")
	default:
		add(severityProblem, "serve-answers", fmt.Sprintf("nothing answers the CRI image service on %s", socket),
			"systemctl status pullguard; serve's --listen in pullguard.service must be "+socket)
	}
	return false, listening
}

// checkRuntime asks the container runtime serve forwards to (endpoint:
// serve's --image-service-endpoint, else the kubelet's runtime) for
// ImageFsInfo. An embedded runtime, or none known, is not checked.
func (o *doctorOptions) checkRuntime(ctx context.Context, endpoint string, add func(severity, check, what, fix string)) bool {
	if endpoint == "" || endpoint == EmbeddedEndpoint {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	svc, err := criruntime.NewRemote(ctx, o.onHost(endpoint), o.timeout)
	if err == nil {
		defer svc.Close(context.WithoutCancel(ctx))
		_, err = svc.ImageFsInfo(ctx)
	}
	if err != nil {
		add(severityProblem, "runtime", fmt.Sprintf("the container runtime does not answer on %s: every image call of the kubelet fails until it does", endpoint),
			fmt.Sprintf("start the runtime (systemctl status %s; journalctl -u %s); serve keeps running and forwards again once it answers", runtimeUnit(endpoint), runtimeUnit(endpoint)))
		return false
	}
	add(severityOK, "runtime", fmt.Sprintf("the container runtime answers on %s", endpoint), "")
	return true
}

// onHost is endpoint, a socket of the node, as doctor reaches it: under
// reachUnder when doctor runs in a container with the node's / there
// (install's and the node agent's checks). What doctor says names the
// node's path; what the kubelet's settings are compared with is the
// node's path too.
func (o *doctorOptions) onHost(endpoint string) string {
	if o.reachUnder == "" || o.reachUnder == "/" {
		return endpoint
	}
	ep, err := criruntime.ParseEndpoint(endpoint)
	if err != nil || !strings.HasPrefix(ep, "unix://") {
		return endpoint
	}
	return "unix://" + filepath.Join(o.reachUnder, strings.TrimPrefix(ep, "unix://"))
}

// runtimeUnit guesses the systemd unit of the runtime at endpoint.
func runtimeUnit(endpoint string) string {
	switch {
	case strings.Contains(endpoint, "k3s"):
		return "k3s"
	case strings.Contains(endpoint, "crio"):
		return "crio"
	case strings.Contains(endpoint, "cri-dockerd"):
		return "cri-docker"
	}
	return "containerd"
}

// checkProtection reads serve's /healthz. alive is whether serve answered
// at all (it then runs, and holds its record store); protecting whether it
// said it protects.
func (o *doctorOptions) checkProtection(ctx context.Context, metrics, runtime string, runtimeUp bool, add func(severity, check, what, fix string)) (alive, protecting bool) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	url := "http://" + metrics + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		add(severityProblem, "serve-protection", fmt.Sprintf("--serve-metrics-address %q: %v", metrics, err), "")
		return false, false
	}
	// No proxy: /healthz is serve's, on this node.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		add(severityProblem, "serve-protection", fmt.Sprintf("nothing answers %s: cannot tell whether serve protects", url),
			fmt.Sprintf("pullguard.service ExecStart: `--metrics-bind-address %s` (or give doctor serve's address with --serve-metrics-address)", metrics))
		return false, false
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	body := strings.TrimSpace(string(data))
	switch {
	case resp.StatusCode != http.StatusOK && !runtimeUp:
		add(severityProblem, "serve-protection", fmt.Sprintf("serve runs, but cannot protect or answer while its runtime (%s) is down: its /healthz answers %d: %s", runtime, resp.StatusCode, body),
			"start the runtime (see the runtime finding); serve needs no restart")
	case resp.StatusCode != http.StatusOK:
		add(severityProblem, "serve-protection", fmt.Sprintf("serve's /healthz answers %d: %s", resp.StatusCode, body),
			"pullguard.service ExecStart: `--image-service-endpoint` must be the container runtime's socket, and the runtime running")
	case strings.HasPrefix(body, healthzPassThrough):
		add(severityProblem, "serve-protection", "serve is a pass-through, the protection is OFF: every pod may use every image on the node",
			"pullguard.service ExecStart: remove `--feature-gates KubeletEnsureSecretPulledImages=false`, then systemctl daemon-reload && systemctl restart pullguard")
	case strings.HasPrefix(body, healthzProtecting):
		add(severityOK, "serve-protection", "serve protects: "+body, "")
		return true, true
	default:
		add(severityWarning, "serve-protection", fmt.Sprintf("serve's /healthz says %q, which does not tell whether it protects (a pullguard older than doctor?)", body),
			"install the pullguard binary of this doctor")
	}
	return true, false
}

// checkStore reads serve's record store as `pullguard records` does,
// without changing it. While serve runs it holds the store, which then
// cannot be read: that is expected of a running serve (serveRuns), healthy
// when it also protects (serveHealthy).
func (o *doctorOptions) checkStore(nodeRootDir string, serveRuns, serveHealthy bool, add func(severity, check, what, fix string)) {
	// The node's path in what doctor says, read where doctor reaches it.
	rootDir := filepath.Join(firstNonEmpty(o.reachUnder, "/"), nodeRootDir)
	dir := filepath.Join(rootDir, podworkers.TrackerDir)
	store := filepath.Join(dir, credtracker.StoreFile)
	if _, err := os.Stat(rootDir); err != nil {
		add(severityProblem, "record-store", fmt.Sprintf("serve's root directory %s: %v", rootDir, err),
			"give doctor serve's --root-dir (pullguard.service ExecStart); serve creates it when it starts")
		return
	}
	if _, err := os.Stat(store); errors.Is(err, fs.ErrNotExist) {
		add(severityWarning, "record-store", fmt.Sprintf("no record store under %s: serve creates it when it starts with the protection on", rootDir),
			"give doctor serve's --root-dir (pullguard.service ExecStart)")
		return
	}
	_, st, err := credtracker.ReadRecords(dir)
	var version *credtracker.StoreVersionError
	switch {
	case errors.Is(err, credtracker.ErrLocked) && serveHealthy:
		add(severityOK, "record-store", fmt.Sprintf("%s is held by the running serve (its health is in /metrics: pullguard_credtracker_store_recoveries_total, pullguard_credtracker_unreadable_records_total)", store), "")
	case errors.Is(err, credtracker.ErrLocked) && serveRuns:
		add(severityOK, "record-store", fmt.Sprintf("%s is held by the running serve", store), "")
	case errors.Is(err, credtracker.ErrLocked):
		add(severityProblem, "record-store", fmt.Sprintf("%s is locked, and serve answers neither on its socket nor on /healthz", store),
			"see which process holds it: fuser -v "+filepath.Join(dir, credtracker.GenerationFile)+" (a serve that hangs: systemctl restart pullguard; a `pullguard run` with --root-dir "+rootDir+": let it finish)")
	case errors.Is(err, fs.ErrPermission):
		add(severityProblem, "record-store", fmt.Sprintf("%s cannot be read: permission denied", store), "run pullguard doctor as root: the store is root's, mode 0600")
	case errors.Is(err, credtracker.ErrStoreTooNew) && errors.As(err, &version):
		add(severityProblem, "record-store", fmt.Sprintf("%s has schema version %d, written by a newer pullguard; this one reads versions 1 to %d and refuses to start on it", store, version.Found, version.Current),
			"install the pullguard that wrote it again; or, to start over, move the store aside, after which every image present on the node needs one verification with its registry (docs/operations.md)")
	case errors.Is(err, credtracker.ErrStoreMigrationPending) && errors.As(err, &version):
		add(severityWarning, "record-store", fmt.Sprintf("%s has schema version %d: serve migrates it to version %d at its next start, keeping every record", store, version.Found, version.Current),
			"systemctl restart pullguard")
	case err != nil:
		add(severityProblem, "record-store", fmt.Sprintf("%s is damaged: %v", store, err),
			"systemctl restart pullguard: at its start serve sets a damaged store aside and rebuilds it from the runtime's images (docs/operations.md)")
	case st.RecoveredAt.IsZero() && !st.Degraded && st.UnreadableRecords == 0:
		add(severityOK, "record-store", fmt.Sprintf("%s is healthy: %d records, %d pending pull intents", store, st.Records, st.Intents), "")
	default:
		add(severityWarning, "record-store", fmt.Sprintf("%s needs attention: %d records, %d unreadable; rebuilt: %v; seeded: %v", store, st.Records, st.UnreadableRecords, !st.RecoveredAt.IsZero(), !st.Degraded),
			"pullguard records --root-dir "+rootDir+" tells which records and why (docs/operations.md)")
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
