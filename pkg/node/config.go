package node

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/featuregates"
	"github.com/pullguard/pullguard/imagemanager"
)

// ErrInvalidConfig is wrapped by every error about the node's configuration.
var ErrInvalidConfig = errors.New("invalid configuration")

// Settings are the kubelet settings pullguard uses, after the config file
// and the flags are merged.
type Settings struct {
	Gates                 featuregates.Gates
	Policy                credtracker.Policy
	Allowlist             []string
	SerializeImagePulls   bool
	MaxParallelImagePulls int32
	RegistryPullQPS       float32
	RegistryBurst         int
}

// Flags are the command-line values that override the config file; empty
// means "not given".
type Flags struct {
	FeatureGates string
	Policy       string
}

var kubeletScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := kubeletconfig.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

var kubeletCodecs = serializer.NewCodecFactory(kubeletScheme, serializer.EnableStrict)

// LoadKubeletConfig reads a kubelet.config.k8s.io/v1beta1
// KubeletConfiguration (YAML or JSON), strictly: unknown or duplicated
// fields are errors.
func LoadKubeletConfig(path string) (*kubeletconfig.KubeletConfiguration, error) {
	data, err := ReadFileLimited(path, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to read kubelet configuration: %w", err)
	}
	obj, gvk, err := kubeletCodecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, path, err)
	}
	cfg, ok := obj.(*kubeletconfig.KubeletConfiguration)
	if !ok {
		return nil, fmt.Errorf("%w: %s: kind %s is not a KubeletConfiguration", ErrInvalidConfig, path, gvk.Kind)
	}
	return cfg, nil
}

// ResolveSettings merges the config file (nil: none) and the flags, which
// win, applies the kubelet's defaults and checks the result. Errors name
// the field.
func ResolveSettings(cfg *kubeletconfig.KubeletConfiguration, flags Flags) (Settings, error) {
	if cfg == nil {
		cfg = &kubeletconfig.KubeletConfiguration{}
	}
	gates, err := featuregates.Parse(cfg.FeatureGates, flags.FeatureGates)
	if err != nil {
		return Settings{}, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	policy := string(cfg.ImagePullCredentialsVerificationPolicy)
	if flags.Policy != "" {
		policy = flags.Policy
	}
	p, err := credtracker.ParsePolicy(policy)
	if err != nil {
		return Settings{}, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if _, err := credtracker.NewAllowlist(cfg.PreloadedImagesVerificationAllowlist); err != nil {
		return Settings{}, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	s := Settings{
		Gates:               gates,
		Policy:              p,
		Allowlist:           cfg.PreloadedImagesVerificationAllowlist,
		SerializeImagePulls: true,
		RegistryPullQPS:     imagemanager.DefaultRegistryQPS,
		RegistryBurst:       imagemanager.DefaultRegistryBurst,
	}
	if cfg.SerializeImagePulls != nil {
		s.SerializeImagePulls = *cfg.SerializeImagePulls
	}
	if cfg.MaxParallelImagePulls != nil {
		if s.SerializeImagePulls {
			return Settings{}, fmt.Errorf("%w: maxParallelImagePulls cannot be set when serializeImagePulls is true", ErrInvalidConfig)
		}
		if *cfg.MaxParallelImagePulls < 1 {
			return Settings{}, fmt.Errorf("%w: maxParallelImagePulls %d must be at least 1", ErrInvalidConfig, *cfg.MaxParallelImagePulls)
		}
		s.MaxParallelImagePulls = *cfg.MaxParallelImagePulls
	}
	if cfg.RegistryPullQPS != nil {
		if *cfg.RegistryPullQPS < 0 {
			return Settings{}, fmt.Errorf("%w: registryPullQPS %d must not be negative", ErrInvalidConfig, *cfg.RegistryPullQPS)
		}
		s.RegistryPullQPS = float32(*cfg.RegistryPullQPS)
	}
	switch {
	case cfg.RegistryBurst < 0:
		return Settings{}, fmt.Errorf("%w: registryBurst %d must not be negative", ErrInvalidConfig, cfg.RegistryBurst)
	case cfg.RegistryBurst > 0:
		s.RegistryBurst = int(cfg.RegistryBurst)
	}
	if s.RegistryPullQPS > 0 && s.RegistryBurst == 0 {
		return Settings{}, fmt.Errorf("%w: registryBurst must be positive when registryPullQPS is set", ErrInvalidConfig)
	}
	return s, nil
}
