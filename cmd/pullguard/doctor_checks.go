package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// suggestedMaxParallelImagePulls is deploy/kubelet/config-snippet.yaml's.
const suggestedMaxParallelImagePulls = 10

// defaultMaxPods is the kubelet's default maxPods.
const defaultMaxPods = 110

// kubeletView is the kubelet's configuration as the kubelet reads it: its
// file, then the flags of its flags files over it.
type kubeletView struct {
	path   string
	cfg    *kubeletconfig.KubeletConfiguration // the file with the flags applied
	fields map[string]int                      // top-level field → line in the file
	flags  map[string]kubeletFlag
}

// fix names where to set a setting: the flags file line that gives flag,
// which wins, else the configuration file's field.
func (k *kubeletView) fix(flag, flagValue, field, fieldValue string) string {
	if f, ok := k.flags[flag]; ok {
		return fmt.Sprintf("%s: set `--%s=%s`", f.where(), flag, flagValue)
	}
	return k.fixField(field, fmt.Sprintf("set `%s: %s`", field, fieldValue))
}

func (k *kubeletView) fixField(field, change string) string {
	if n, ok := k.fields[field]; ok {
		return fmt.Sprintf("%s:%d: %s", k.path, n, change)
	}
	return fmt.Sprintf("%s: %s", k.path, strings.Replace(change, "set ", "add ", 1))
}

var topField = regexp.MustCompile(`^"?([A-Za-z]+)"?\s*:`)

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
	if k, err := o.readKubelet(); err != nil {
		add(severityProblem, "kubelet-config", err.Error(), "give doctor the kubelet's file with --kubelet-config, its flags files with --kubelet-flags-files")
	} else {
		checkKubelet(k, o.serveSocket, add)
	}
	answers := o.checkServeAnswers(ctx, add)
	protecting := o.checkProtection(ctx, add)
	o.checkStore(answers && protecting, add)
	return doc
}

func (o *doctorOptions) readKubelet() (*kubeletView, error) {
	k := &kubeletView{path: o.kubeletConfig, fields: map[string]int{}}
	cfg, _, err := nodeconfig.LoadKubeletConfig(o.kubeletConfig)
	if err != nil {
		return nil, err
	}
	if data, err := os.ReadFile(o.kubeletConfig); err == nil {
		for i, line := range strings.Split(string(data), "\n") {
			if m := topField.FindStringSubmatch(line); m != nil {
				k.fields[m[1]] = i + 1
			}
		}
	}
	if k.flags, err = readKubeletFlags(o.flagsFiles); err != nil {
		return nil, err
	}
	// The flags doctor reads override the file, as on the kubelet.
	var errs []error
	for name, f := range k.flags {
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
	k.cfg = cfg
	return k, errors.Join(errs...)
}

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
	case got != want:
		add(severityProblem, "image-service-endpoint", fmt.Sprintf("the kubelet asks %s for images, not serve's %s: serve protects nothing", image, want),
			k.fix("image-service-endpoint", want, "imageServiceEndpoint", want))
	default:
		add(severityOK, "image-service-endpoint", fmt.Sprintf("the kubelet asks serve (%s) for images", want), "")
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
		add(severityProblem, "kubelet-config", "the kubelet rejects its configuration: "+err.Error(), k.path)
		return
	}
	if !rejected {
		add(severityOK, "kubelet-config", fmt.Sprintf("the kubelet accepts %s (its own KubeletEnsureSecretPulledImages gate is %s; serve protects either way)", k.path, onOff(gates.EnsureSecretPulledImages)), "")
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

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// checkServeAnswers asks serve's socket for ImageFsInfo.
func (o *doctorOptions) checkServeAnswers(ctx context.Context, add func(severity, check, what, fix string)) bool {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	svc, err := criruntime.NewRemote(ctx, o.serveSocket, o.timeout)
	if err != nil {
		add(severityProblem, "serve-answers", fmt.Sprintf("nothing answers the CRI image service on %s", o.serveSocket),
			"systemctl status pullguard; serve's --listen in pullguard.service must be "+o.serveSocket)
		return false
	}
	defer svc.Close(context.WithoutCancel(ctx))
	add(severityOK, "serve-answers", fmt.Sprintf("serve answers the CRI image service on %s", o.serveSocket), "")
	return true
}

// checkProtection reads serve's /healthz.
func (o *doctorOptions) checkProtection(ctx context.Context, add func(severity, check, what, fix string)) bool {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	url := "http://" + o.serveMetrics + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		add(severityProblem, "serve-protection", fmt.Sprintf("--serve-metrics-address %q: %v", o.serveMetrics, err), "")
		return false
	}
	// No proxy: /healthz is serve's, on this node.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		add(severityProblem, "serve-protection", fmt.Sprintf("nothing answers %s: cannot tell whether serve protects", url),
			fmt.Sprintf("pullguard.service ExecStart: `--metrics-bind-address %s` (or give doctor serve's address with --serve-metrics-address)", o.serveMetrics))
		return false
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	body := strings.TrimSpace(string(data))
	switch {
	case resp.StatusCode != http.StatusOK:
		add(severityProblem, "serve-protection", fmt.Sprintf("serve's /healthz answers %d: %s", resp.StatusCode, body),
			"pullguard.service ExecStart: `--image-service-endpoint` must be the container runtime's socket, and the runtime running")
	case strings.HasPrefix(body, healthzPassThrough):
		add(severityProblem, "serve-protection", "serve is a pass-through, the protection is OFF: every pod may use every image on the node",
			"pullguard.service ExecStart: remove `--feature-gates KubeletEnsureSecretPulledImages=false`, then systemctl daemon-reload && systemctl restart pullguard")
	case strings.HasPrefix(body, healthzProtecting):
		add(severityOK, "serve-protection", "serve protects: "+body, "")
		return true
	default:
		add(severityWarning, "serve-protection", fmt.Sprintf("serve's /healthz says %q, which does not tell whether it protects (a pullguard older than doctor?)", body),
			"install the pullguard binary of this doctor")
	}
	return false
}

// checkStore reads serve's record store as `pullguard records` does,
// without changing it. While serve runs it holds the store, which then
// cannot be read: that is expected of a running, protecting serve.
func (o *doctorOptions) checkStore(serveHoldsIt bool, add func(severity, check, what, fix string)) {
	dir := filepath.Join(o.rootDir, podworkers.TrackerDir)
	store := filepath.Join(dir, credtracker.StoreFile)
	if _, err := os.Stat(o.rootDir); err != nil {
		add(severityProblem, "record-store", fmt.Sprintf("serve's root directory %s: %v", o.rootDir, err),
			"give doctor serve's --root-dir (pullguard.service ExecStart); serve creates it when it starts")
		return
	}
	if _, err := os.Stat(store); errors.Is(err, fs.ErrNotExist) {
		add(severityWarning, "record-store", fmt.Sprintf("no record store under %s: serve creates it when it starts with the protection on", o.rootDir),
			"give doctor serve's --root-dir (pullguard.service ExecStart)")
		return
	}
	_, st, err := credtracker.ReadRecords(dir)
	var version *credtracker.StoreVersionError
	switch {
	case errors.Is(err, credtracker.ErrLocked) && serveHoldsIt:
		add(severityOK, "record-store", fmt.Sprintf("%s is held by the running serve (its health is in /metrics: pullguard_credtracker_store_recoveries_total, pullguard_credtracker_unreadable_records_total)", store), "")
	case errors.Is(err, credtracker.ErrLocked):
		add(severityProblem, "record-store", fmt.Sprintf("%s is locked by a process that does not serve", store),
			"stop the other pullguard using "+o.rootDir+" (fuser -v "+filepath.Join(dir, credtracker.GenerationFile)+")")
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
			"pullguard records --root-dir "+o.rootDir+" tells which records and why (docs/operations.md)")
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
