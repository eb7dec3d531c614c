package nodeconfig

import (
	"maps"

	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/pullguard/pullguard/featuregates"
)

// ResolveServeSettings is ResolveSettings for `pullguard serve`, which
// stands beside a kubelet that has its own gate. The kubelet's
// KubeletEnsureSecretPulledImages (and the AllAlpha and AllBeta switches,
// which would set it) in cfg's featureGates are the kubelet's and are not
// read: serve's protection is on unless flags.FeatureGates turns it off. cfg
// may still give the policy and the allowlist, which flags.Policy
// overrides. With the protection off (a pass-through), cfg's policy and
// allowlist, which are valid for a kubelet with its gate on, are not used.
func ResolveServeSettings(cfg *kubeletconfig.KubeletConfiguration, flags Flags) (Settings, error) {
	if cfg == nil {
		cfg = &kubeletconfig.KubeletConfiguration{}
	}
	own := *cfg
	own.FeatureGates = maps.Clone(cfg.FeatureGates)
	for _, g := range []string{string(featuregates.EnsureSecretPulledImages), "AllAlpha", "AllBeta"} {
		delete(own.FeatureGates, g)
	}
	if gates, err := featuregates.Parse(nil, flags.FeatureGates); err == nil && !gates.EnsureSecretPulledImages {
		own.ImagePullCredentialsVerificationPolicy = ""
		own.PreloadedImagesVerificationAllowlist = nil
	}
	return resolve(&own, nil, "", flags)
}
