package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	"k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/util/codec"

	"github.com/pullguard/pullguard/pkg/nodeconfig"
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
// v1.36 accepts, pullguard accepts (`pullguard run --config` and `serve
// --config` read it with nodeconfig.LoadSettings and LoadKubeletConfig), and
// every one it refuses for a field pullguard reads, pullguard refuses. The
// files combine the fields pullguard reads with values on both sides of
// each of the kubelet's rules; both verdicts come from running the code.
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
	n, accepted := 0, 0
	check := func(body string) {
		t.Helper()
		// failCgroupV1: false, or the kubelet refuses every file on a
		// cgroup v1 host (a check of the machine, not of the file).
		data := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\n" + body
		path := filepath.Join(dir, fmt.Sprintf("kc-%d.yaml", n))
		n++
		require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
		kerr := kubeletVerdict(t, []byte(data))
		_, perr := nodeconfig.LoadSettings(path, nodeconfig.Flags{})
		if kerr == nil {
			accepted++
			assert.NoError(t, perr, "the kubelet accepts this file, pullguard refuses it:\n%s", data)
		} else {
			assert.Error(t, perr, "the kubelet refuses this file (%v), pullguard accepts it:\n%s", kerr, data)
		}
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
	t.Logf("%d files, %d accepted by the kubelet", n, accepted)
	assert.Greater(t, accepted, 40, "the table must exercise accepted files")
	assert.Less(t, accepted, n*9/10, "the table must exercise refused files")
}
