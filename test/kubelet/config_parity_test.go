package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	"k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/util/codec"
)

// kubeletVerdict reads a KubeletConfiguration file as the kubelet v1.36
// reads its --config: DecodeKubeletConfiguration (strict, then lenient for
// v1beta1), the v1beta1 defaults, then ValidateKubeletConfiguration
// against the kubelet's own feature gates.
//
// The kubelet's defaulting panics on featureGates it cannot set (a gate
// locked to its default): that is a refusal too.
func kubeletVerdict(t *testing.T, data []byte) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	_, codecs, err := kubeletscheme.NewSchemeAndCodecs(serializer.EnableStrict)
	require.NoError(t, err)
	kc, err := codec.DecodeKubeletConfiguration(context.Background(), codecs, data)
	if err != nil {
		return err
	}
	return validation.ValidateKubeletConfiguration(kc, utilfeature.DefaultFeatureGate)
}

// TestKubeletConfigurationParity: every KubeletConfiguration the kubelet
// v1.36 accepts, pullguard accepts, and every one it refuses for a field
// pullguard reads, pullguard refuses. The files combine the fields
// pullguard reads with values on both sides of each of the kubelet's
// rules; both verdicts come from running the code: the kubelet's in this
// process (this module builds the kubelet, so its packages compile once),
// pullguard's from `pullguard config check`, which reads each file as `run
// --config` and `serve --config` read it (nodeconfig.LoadSettings). It
// needs neither root nor a cluster.
func TestKubeletConfigurationParity(t *testing.T) {
	gates := []string{
		"",
		"featureGates: {KubeletEnsureSecretPulledImages: false}\n",
		"featureGates: {KubeletEnsureSecretPulledImages: true}\n",
		// The kubelet's own gates are the kubelet's to check: pullguard
		// cannot list them, so the table names only settable ones.
		"featureGates: {GracefulNodeShutdown: true, ImageVolume: true}\n",
		"featureGates: {AllBeta: false}\n",
		"featureGates: {KubeletEnsureSecretPulledImages: false, KubeletServiceAccountTokenForCredentialProviders: false}\n",
	}
	policies := []string{"", "NeverVerify", "NeverVerifyPreloadedImages", "NeverVerifyAllowlistedImages", "AlwaysVerify", "Sometimes", "alwaysverify"}
	allowlists := []string{
		"", `[ubuntu]`, `[docker.io/library/ubuntu]`, `[library/ubuntu]`, `["bitnami/*"]`, `["registry.example/team/*"]`,
		`["index.docker.io/*"]`, `["localhost:5000/app"]`, `["registry.example//*"]`, `["ubuntu:24.04"]`,
		`["ubuntu@sha256:4c5c9d0b85ad4d4ca6d5a9d7c0e4f6b2d6a4e3b3b1d8f2f54e6b4d7e8c3f1a2b"]`, `["registry.example/*/app"]`,
		`[" registry.example/app"]`, `["registry.io/myorg/"]`, `["registry.example/Team/app"]`, `["/*"]`, `["*"]`, `[""]`,
	}
	others := []string{
		"",
		"serializeImagePulls: false\nmaxParallelImagePulls: 3\n",
		"maxParallelImagePulls: 3\n",
		"serializeImagePulls: true\nmaxParallelImagePulls: 3\n",
		"serializeImagePulls: false\nmaxParallelImagePulls: 0\n",
		"maxParallelImagePulls: 1\n",
		"registryPullQPS: 0\nregistryBurst: 0\n",
		"registryPullQPS: 20\nregistryBurst: 40\n",
		"registryPullQPS: -1\n",
		"registryBurst: -1\n",
		"noSuchField: 1\n",
		"registryBurst: 3\nregistryBurst: 4\n",
		"containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\nimageServiceEndpoint: unix:///run/pullguard/pullguard.sock\n",
		"cgroupDriver: systemd\nclusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\nimageGCHighThresholdPercent: 85\n",
	}
	dir := t.TempDir()
	type file struct {
		path, data string
		kerr       error
	}
	var files []file
	check := func(body string) {
		t.Helper()
		// failCgroupV1: false, or the kubelet refuses every file on a
		// cgroup v1 host (a check of the machine, not of the file).
		data := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\n" + body
		path := filepath.Join(dir, fmt.Sprintf("kc-%d.yaml", len(files)))
		require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
		files = append(files, file{path: path, data: data, kerr: kubeletVerdict(t, []byte(data))})
	}
	i := 0
	for _, g := range gates {
		for _, p := range policies {
			for _, a := range allowlists {
				body := g
				if p != "" {
					body += "imagePullCredentialsVerificationPolicy: " + p + "\n"
				}
				if a != "" {
					body += "preloadedImagesVerificationAllowlist: " + a + "\n"
				}
				check(body + others[i%len(others)])
				i++
			}
		}
	}
	for _, o := range others {
		for _, p := range []string{"", "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [ubuntu]\n"} {
			check(o + p)
		}
	}

	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.path
	}
	verdicts := pullguardConfigCheck(t, paths)
	accepted := 0
	for _, f := range files {
		perr, ok := verdicts[f.path]
		require.True(t, ok, "pullguard config check printed no verdict for %s", f.path)
		if f.kerr == nil {
			accepted++
			assert.Empty(t, perr, "the kubelet accepts this file, pullguard refuses it:\n%s", f.data)
		} else {
			assert.NotEmpty(t, perr, "the kubelet refuses this file (%v), pullguard accepts it:\n%s", f.kerr, f.data)
		}
	}
	t.Logf("%d files, %d accepted by the kubelet", len(files), accepted)
	assert.Greater(t, accepted, 40, "the table must exercise accepted files")
	assert.Less(t, accepted, len(files)*9/10, "the table must exercise refused files")
}

// pullguardConfigCheck builds this checkout's pullguard and runs `pullguard
// config check -o json` once on every file: its verdict per file, "" for
// accepted, the error otherwise.
func pullguardConfigCheck(t *testing.T, paths []string) map[string]string {
	t.Helper()
	src := filepath.Join("..", "..")
	if s := os.Getenv("PULLGUARD_E2E_SOURCE"); s != "" {
		src = s
	}
	bin := filepath.Join(t.TempDir(), "pullguard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/pullguard")
	build.Dir = src
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/pullguard in %s: %s", src, out)

	cmd := exec.Command(bin, append([]string{"config", "check", "-o", "json"}, paths...)...)
	out, err = cmd.Output()
	// Exit status 1 when a file is refused: the document tells which.
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		require.NoError(t, err, "pullguard config check")
	}
	var doc struct {
		Kind  string `json:"kind"`
		Files []struct {
			File     string `json:"file"`
			Accepted bool   `json:"accepted"`
			Error    string `json:"error"`
		} `json:"files"`
	}
	require.NoError(t, json.Unmarshal(out, &doc), "pullguard config check -o json printed:\n%s", lastBytes(out, 2000))
	require.Equal(t, "ConfigCheck", doc.Kind)
	verdicts := make(map[string]string, len(doc.Files))
	for _, f := range doc.Files {
		require.Equal(t, f.Accepted, f.Error == "", "an error exactly when refused: %+v", f)
		verdicts[f.File] = f.Error
	}
	return verdicts
}
