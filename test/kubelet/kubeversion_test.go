package kubelet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// kubeletVersionEnv names another kubelet release for the scenarios
// (`make e2e-kubelet KUBELET_VERSION=1.31.14`): v1.31 or later. The
// kube-apiserver stays kubeVersion while the kubelet is within the skew
// it supports (up to three minors older); an older kubelet gets the
// kube-apiserver of its own release.
const kubeletVersionEnv = "PULLGUARD_E2E_KUBELET_VERSION"

// apiserverSkew is how many minor versions a kubelet may be older than
// its kube-apiserver (the Kubernetes version skew policy).
const apiserverSkew = 3

// Kubelet minors whose behaviour the harness adapts to.
const (
	// ensureSecretPulledMinor is the first kubelet with
	// KubeletEnsureSecretPulledImages (alpha in 1.33) and
	// imagePullCredentialsVerificationPolicy.
	ensureSecretPulledMinor = 33
	// imageVolumeDigestMinor is the first release with the
	// ImageVolumeWithDigest gate (1.35, when image volumes became on by
	// default).
	imageVolumeDigestMinor = 35
	// alwaysPullsWithoutAskingMinor is the first kubelet that pulls an
	// Always container's image without asking ImageStatus first.
	alwaysPullsWithoutAskingMinor = 32
	// oldestKubeletMinor is the oldest kubelet the harness configures.
	oldestKubeletMinor = 31
)

var releaseVersion = regexp.MustCompile(`^v1\.(\d+)\.(\d+)$`)

// kubeRelease is one Kubernetes release: "v1.31.14", minor 31.
type kubeRelease struct {
	version string
	minor   int
}

func parseRelease(v string) (kubeRelease, error) {
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	m := releaseVersion.FindStringSubmatch(v)
	if m == nil {
		return kubeRelease{}, fmt.Errorf("%q is not a Kubernetes release (v1.MINOR.PATCH)", v)
	}
	minor, _ := strconv.Atoi(m[1])
	return kubeRelease{version: v, minor: minor}, nil
}

// kubeletRelease is the kubelet the scenarios run: kubeletVersionEnv's, or
// kubeVersion.
func kubeletRelease(t *testing.T) kubeRelease {
	t.Helper()
	v := os.Getenv(kubeletVersionEnv)
	if v == "" {
		v = kubeVersion
	}
	r, err := parseRelease(v)
	require.NoError(t, err, "%s", kubeletVersionEnv)
	require.GreaterOrEqual(t, r.minor, oldestKubeletMinor, "%s=%s: the harness configures kubelets from v1.%d on", kubeletVersionEnv, v, oldestKubeletMinor)
	return r
}

// kubeBinaries returns the kubelet and kube-apiserver the scenarios run,
// and the kubelet's release.
func kubeBinaries(t *testing.T) (kubelet, apiserver string, rel, apiRel kubeRelease) {
	t.Helper()
	rel = kubeletRelease(t)
	module, err := parseRelease(kubeVersion)
	require.NoError(t, err)
	if rel.version == kubeVersion {
		kubelet, apiserver = buildKube(t)
		return kubelet, apiserver, rel, module
	}
	if module.minor-rel.minor > apiserverSkew {
		dir := buildRelease(t, rel, []string{"kubelet", "kube-apiserver"})
		kubelet, apiserver, apiRel = filepath.Join(dir, "kubelet"), filepath.Join(dir, "kube-apiserver"), rel
	} else {
		_, apiserver = buildKube(t)
		kubelet, apiRel = filepath.Join(buildRelease(t, rel, []string{"kubelet"}), "kubelet"), module
	}
	t.Logf("kubelet %s, kube-apiserver %s", rel.version, apiRel.version)
	return kubelet, apiserver, rel, apiRel
}

// buildRelease builds names (from k8s.io/kubernetes/cmd) at rel into the
// module cache, once per release, as buildKube does for kubeVersion: in a
// throwaway module that requires k8s.io/kubernetes at rel and replaces
// each staging module that k8s.io/kubernetes requires at v0.0.0 with its
// v0.MINOR.PATCH release (a release the module proxy lacks is replaced by
// the newest of its minor the proxy has, said in the log). Its go.mod
// takes k8s.io/kubernetes's `go` and `godebug` lines, so the binaries run
// with the settings upstream's build gives them.
func buildRelease(t *testing.T, rel kubeRelease, names []string) string {
	t.Helper()
	return buildCommands(t, rel, names, func(tmp string) string {
		releaseModule(t, rel, names, tmp)
		return tmp
	})
}

// releaseModule writes buildRelease's module in dir and resolves its
// dependencies.
func releaseModule(t *testing.T, rel kubeRelease, names []string, dir string) {
	t.Helper()
	goCmd := func(args ...string) ([]byte, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		return cmd.CombinedOutput()
	}
	out, err := goCmd("mod", "download", "-json", "k8s.io/kubernetes@"+rel.version)
	require.NoError(t, err, "%s", out)
	var dl struct{ GoMod string }
	require.NoError(t, json.Unmarshal(out, &dl), "%s", out)
	gomod, err := releaseGoMod(dl.GoMod, rel)
	require.NoError(t, err)
	path := filepath.Join(dir, "go.mod")
	require.NoError(t, os.WriteFile(path, []byte(gomod), 0o644))

	args := []string{"get"}
	for _, name := range names {
		args = append(args, "k8s.io/kubernetes/cmd/"+name+"@"+rel.version)
	}
	unavailable := regexp.MustCompile(`(k8s\.io/[a-z0-9-]+)@(v0\.\d+\.\d+): reading \S+: 40[34]`)
	for attempt := 0; ; attempt++ {
		out, err := goCmd(args...)
		if err == nil {
			return
		}
		m := unavailable.FindStringSubmatch(string(out))
		require.True(t, m != nil && attempt < 10, "go %v: %s", args, out)
		alt := newestOfMinor(t, goCmd, m[1], rel.minor)
		t.Logf("%s %s is not on the module proxy: building with %s", m[1], m[2], alt)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		fixed := strings.Replace(string(b), m[1]+" => "+m[1]+" "+m[2], m[1]+" => "+m[1]+" "+alt, 1)
		require.NoError(t, os.WriteFile(path, []byte(fixed), 0o644))
	}
}

// releaseGoMod is the throwaway module's go.mod for rel, from
// k8s.io/kubernetes's go.mod at path.
func releaseGoMod(path string, rel kubeRelease) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	patch := rel.version[strings.LastIndex(rel.version, ".")+1:]
	staging := regexp.MustCompile(`^\s*(k8s\.io/[a-z0-9-]+) => \./staging/src/`)
	var b strings.Builder
	fmt.Fprintf(&b, "module pullguard-e2e/kubernetes-%s\n\n", rel.version)
	var replaces []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "go "), strings.HasPrefix(line, "godebug "):
			b.WriteString(line + "\n")
		default:
			if m := staging.FindStringSubmatch(line); m != nil {
				replaces = append(replaces, fmt.Sprintf("\t%s => %s v0.%d.%s", m[1], m[1], rel.minor, patch))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(replaces) == 0 {
		return "", fmt.Errorf("%s: no staging module replaced", path)
	}
	fmt.Fprintf(&b, "\nrequire k8s.io/kubernetes %s\n\nreplace (\n%s\n)\n", rel.version, strings.Join(replaces, "\n"))
	return b.String(), nil
}

// newestOfMinor is the newest v0.MINOR.x release of module on the module
// proxy.
func newestOfMinor(t *testing.T, goCmd func(...string) ([]byte, error), module string, minor int) string {
	t.Helper()
	out, err := goCmd("list", "-m", "-versions", module)
	require.NoError(t, err, "%s", out)
	prefix := fmt.Sprintf("v0.%d.", minor)
	best, bestPatch := "", -1
	for _, v := range strings.Fields(string(out))[1:] {
		if p, err := strconv.Atoi(strings.TrimPrefix(v, prefix)); err == nil && strings.HasPrefix(v, prefix) && p > bestPatch {
			best, bestPatch = v, p
		}
	}
	require.NotEmpty(t, best, "%s has no %sx release on the module proxy", module, prefix)
	return best
}

// kubeletFeatureGates is the featureGates of the kubelet's configuration:
// KubeletEnsureSecretPulledImages as the mode says, left out for a kubelet
// that does not know it (which refuses an unknown gate).
func (c *cluster) kubeletFeatureGates() string {
	if c.bins.kubeletRelease.minor < ensureSecretPulledMinor {
		return ""
	}
	return fmt.Sprintf("featureGates:\n  KubeletEnsureSecretPulledImages: %t\n", c.mode.kubeletGate)
}

// skipUnsupported skips a mode the kubelet's release cannot run: its own
// KEP-2535 implementation before 1.33.
func skipUnsupported(t *testing.T, m mode, rel kubeRelease) {
	t.Helper()
	if m.kubeletGate && rel.minor < ensureSecretPulledMinor {
		t.Skipf("kubelet %s has no KubeletEnsureSecretPulledImages (from v1.%d): the mode %q needs it", rel.version, ensureSecretPulledMinor, m.name)
	}
}
