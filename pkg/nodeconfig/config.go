package nodeconfig

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/featuregates"
	"github.com/pullguard/pullguard/internal/boundedread"
)

// ErrInvalidConfig is wrapped by every error about the node's configuration.
var ErrInvalidConfig = errors.New("invalid configuration")

// The kubelet's defaults for the image pull throttle (registryPullQPS,
// registryBurst in KubeletConfiguration v1beta1).
const (
	DefaultRegistryPullQPS = 5
	DefaultRegistryBurst   = 10
)

// MaxFileBytes bounds a configuration file: far above any real kubelet
// configuration, far below what would hurt a node's memory.
const MaxFileBytes = 8 << 20

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
	// ContainerRuntimeEndpoint and ImageServiceEndpoint are the CRI
	// endpoints, flags winning over the file; ImageEndpoint gives the one
	// to use for images. Both empty: the embedded runtime.
	ContainerRuntimeEndpoint string
	ImageServiceEndpoint     string
	// Warnings name what the configuration sets that pullguard does not
	// use; the caller logs them.
	Warnings []string
}

// ImageEndpoint is the CRI endpoint of the image service: the
// imageServiceEndpoint, else the containerRuntimeEndpoint, as in the
// kubelet ("" for the embedded runtime).
func (s Settings) ImageEndpoint() string {
	if s.ImageServiceEndpoint != "" {
		return s.ImageServiceEndpoint
	}
	return s.ContainerRuntimeEndpoint
}

// Flags are the command-line values that override the config file; empty
// means "not given".
type Flags struct {
	FeatureGates    string
	Policy          string
	RuntimeEndpoint string
	ImageEndpoint   string
}

var kubeletScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := kubeletconfig.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

var (
	kubeletCodecs = serializer.NewCodecFactory(kubeletScheme, serializer.EnableStrict)
	// lenientCodecs decode a file that strict decoding refuses (an unknown
	// or a duplicated field), as the kubelet does for v1beta1
	// (DecodeKubeletConfiguration, with a warning).
	lenientCodecs = serializer.NewCodecFactory(kubeletScheme)
)

// usedFields are the KubeletConfiguration fields pullguard applies.
var usedFields = map[string]bool{
	"apiVersion": true, "kind": true,
	"featureGates": true, "imagePullCredentialsVerificationPolicy": true, "preloadedImagesVerificationAllowlist": true,
	"serializeImagePulls": true, "maxParallelImagePulls": true, "registryPullQPS": true, "registryBurst": true,
	"containerRuntimeEndpoint": true, "imageServiceEndpoint": true,
}

// LoadKubeletConfig reads a kubelet.config.k8s.io/v1beta1
// KubeletConfiguration (YAML or JSON) as the kubelet reads it: strictly
// first, and, if only strictness fails (an unknown or a duplicated field),
// leniently, with that failure in the warnings. A file of another kind, or
// one whose fields have the wrong types, is an error.
func LoadKubeletConfig(path string) (*kubeletconfig.KubeletConfiguration, []string, error) {
	cfg, _, warnings, err := loadKubeletConfig(path)
	return cfg, warnings, err
}

// loadKubeletConfig also returns the top-level fields the file sets.
func loadKubeletConfig(path string) (cfg *kubeletconfig.KubeletConfiguration, keys, warnings []string, err error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("failed to read kubelet configuration: %w", err)
	}
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %s: not YAML or JSON: %v", ErrInvalidConfig, path, err)
	}
	want := kubeletconfig.SchemeGroupVersion.String()
	if av, kind := top["apiVersion"], top["kind"]; av != want || kind != "KubeletConfiguration" {
		return nil, nil, nil, fmt.Errorf("%w: %s: not a KubeletConfiguration (apiVersion %v, kind %v; want apiVersion %s, kind KubeletConfiguration)",
			ErrInvalidConfig, path, quoteAny(av), quoteAny(kind), want)
	}
	keys = make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	obj, _, err := kubeletCodecs.UniversalDeserializer().Decode(data, nil, nil)
	if runtime.IsStrictDecodingError(err) {
		warnings = append(warnings, fmt.Sprintf("%s: read leniently, as the kubelet reads it: %v", path, err))
		obj, _, err = lenientCodecs.UniversalDeserializer().Decode(data, nil, nil)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, path, err)
	}
	cfg, ok := obj.(*kubeletconfig.KubeletConfiguration)
	if !ok {
		return nil, nil, nil, fmt.Errorf("%w: %s: not a KubeletConfiguration", ErrInvalidConfig, path)
	}
	return cfg, keys, warnings, nil
}

func quoteAny(v any) string {
	if v == nil {
		return "(none)"
	}
	return fmt.Sprintf("%q", fmt.Sprint(v))
}

// LoadSettings reads the KubeletConfiguration at path ("" for none), merges
// the flags and checks the result as the kubelet does, naming the file or
// flag and the field of every error. Fields the file sets that pullguard
// does not use are listed in Settings.Warnings.
func LoadSettings(path string, flags Flags) (Settings, error) {
	if path == "" {
		return resolve(nil, nil, "", flags)
	}
	cfg, keys, warnings, err := loadKubeletConfig(path)
	if err != nil {
		return Settings{}, err
	}
	s, err := resolve(cfg, keys, path, flags)
	s.Warnings = append(warnings, s.Warnings...)
	return s, err
}

// ResolveSettings merges the config file (nil: none) and the flags, which
// win, applies the kubelet's defaults and checks the result. Errors name
// the field.
func ResolveSettings(cfg *kubeletconfig.KubeletConfiguration, flags Flags) (Settings, error) {
	return resolve(cfg, nil, "", flags)
}

func resolve(cfg *kubeletconfig.KubeletConfiguration, keys []string, file string, flags Flags) (Settings, error) {
	if cfg == nil {
		cfg = &kubeletconfig.KubeletConfiguration{}
	}
	source := "the kubelet configuration"
	if file != "" {
		source = file
	}

	// The file's featureGates are the kubelet's: it checks the gates it
	// knows, pullguard reads its own and leaves the others alone.
	configGates, otherGates := featuregates.Split(cfg.FeatureGates)
	gates, err := featuregates.Parse(configGates, flags.FeatureGates)
	if err != nil {
		return Settings{}, fmt.Errorf("%w: %s or --feature-gates: featureGates: %v", ErrInvalidConfig, source, err)
	}
	policy, policyFrom := string(cfg.ImagePullCredentialsVerificationPolicy), source
	if flags.Policy != "" {
		policy, policyFrom = flags.Policy, "--image-pull-credentials-verification-policy"
	}
	s := Settings{
		Gates:                    gates,
		Allowlist:                cfg.PreloadedImagesVerificationAllowlist,
		RegistryPullQPS:          DefaultRegistryPullQPS,
		RegistryBurst:            DefaultRegistryBurst,
		ContainerRuntimeEndpoint: firstSet(flags.RuntimeEndpoint, cfg.ContainerRuntimeEndpoint),
		ImageServiceEndpoint:     firstSet(flags.ImageEndpoint, cfg.ImageServiceEndpoint),
	}
	errs := resolveVerification(&s, policy, policyFrom, source)
	errs = append(errs, resolvePullSettings(&s, cfg, source)...)
	if err := errors.Join(errs...); err != nil {
		return Settings{}, err
	}
	s.Warnings = append(s.Warnings, unusedWarnings(source, otherGates, keys)...)
	return s, nil
}

// resolveVerification applies the kubelet's rules for the credential
// verification fields: with s.Gates' EnsureSecretPulledImages on, it sets
// s.Policy from policy (given by policyFrom, a file or a flag) and checks
// s.Allowlist against it, warning of an entry that never matches; with the
// gate off, neither may be set. It returns every error, each naming where
// the field came from.
func resolveVerification(s *Settings, policy, policyFrom, source string) []error {
	var errs []error
	if !s.Gates.EnsureSecretPulledImages {
		if policy != "" {
			errs = append(errs, invalid(policyFrom, "imagePullCredentialsVerificationPolicy must not be set if the %s feature gate is not enabled", featuregates.EnsureSecretPulledImages))
		}
		if len(s.Allowlist) > 0 {
			errs = append(errs, invalid(source, "preloadedImagesVerificationAllowlist must not be set if the %s feature gate is not enabled", featuregates.EnsureSecretPulledImages))
		}
		return errs
	}
	p, err := credtracker.ParsePolicy(policy)
	if err != nil {
		errs = append(errs, invalid(policyFrom, "imagePullCredentialsVerificationPolicy %q: valid options are %q, %q, %q or %q",
			policy, credtracker.NeverVerify, credtracker.NeverVerifyPreloadedImages, credtracker.NeverVerifyAllowlistedImages, credtracker.AlwaysVerify))
	}
	s.Policy = p
	if len(s.Allowlist) > 0 && err == nil && p != credtracker.NeverVerifyAllowlistedImages {
		errs = append(errs, invalid(source, "preloadedImagesVerificationAllowlist cannot be set when imagePullCredentialsVerificationPolicy is %q, only with %q",
			p, credtracker.NeverVerifyAllowlistedImages))
	} else if a, err := credtracker.NewAllowlist(s.Allowlist); err != nil {
		errs = append(errs, invalid(source, "%v", err))
	} else {
		for _, u := range a.Unmatchable() {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s: preloadedImagesVerificationAllowlist %q never matches: no repository name starts with it", source, u))
		}
	}
	return errs
}

// resolvePullSettings sets the pull throttle of s from cfg (source names
// it), with the kubelet's defaults and checks: serializeImagePulls,
// maxParallelImagePulls, registryPullQPS and registryBurst. It returns
// every error.
func resolvePullSettings(s *Settings, cfg *kubeletconfig.KubeletConfiguration, source string) []error {
	var errs []error
	// serializeImagePulls defaults to true unless maxParallelImagePulls is
	// above 1, as in the kubelet's defaulting.
	s.SerializeImagePulls = cfg.MaxParallelImagePulls == nil || *cfg.MaxParallelImagePulls < 2
	if cfg.SerializeImagePulls != nil {
		s.SerializeImagePulls = *cfg.SerializeImagePulls
	}
	if m := cfg.MaxParallelImagePulls; m != nil {
		switch {
		case *m < 1:
			errs = append(errs, invalid(source, "maxParallelImagePulls %d must be a positive number", *m))
		case s.SerializeImagePulls && *m > 1:
			errs = append(errs, invalid(source, "maxParallelImagePulls cannot be larger than 1 unless serializeImagePulls is set to false"))
		default:
			s.MaxParallelImagePulls = *m
		}
	}
	if cfg.RegistryPullQPS != nil {
		if *cfg.RegistryPullQPS < 0 {
			errs = append(errs, invalid(source, "registryPullQPS %d must not be a negative number", *cfg.RegistryPullQPS))
		}
		s.RegistryPullQPS = float32(*cfg.RegistryPullQPS)
	}
	switch {
	case cfg.RegistryBurst < 0:
		errs = append(errs, invalid(source, "registryBurst %d must not be a negative number", cfg.RegistryBurst))
	case cfg.RegistryBurst > 0:
		s.RegistryBurst = int(cfg.RegistryBurst)
	}
	return errs
}

// unusedWarnings name what source sets that pullguard does not use: the
// featureGates of others (otherGates) and the top-level fields (of keys)
// it does not apply.
func unusedWarnings(source string, otherGates, keys []string) []string {
	var warnings []string
	if len(otherGates) > 0 {
		warnings = append(warnings, fmt.Sprintf("%s: featureGates not used by pullguard: %s", source, strings.Join(otherGates, ", ")))
	}
	var unused []string
	for _, k := range keys {
		if !usedFields[k] {
			unused = append(unused, k)
		}
	}
	if len(unused) > 0 {
		warnings = append(warnings, fmt.Sprintf("%s: fields not used by pullguard: %s", source, strings.Join(unused, ", ")))
	}
	return warnings
}

// invalid is an error about the configuration: what is wrong (format and
// args) with the field of from, a file or a flag.
func invalid(from, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, from, fmt.Sprintf(format, args...))
}

func firstSet(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// readFile reads a configuration file of at most MaxFileBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := boundedread.Read(f, MaxFileBytes)
	if errors.Is(err, boundedread.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %s is larger than the limit of %d bytes", ErrInvalidConfig, path, MaxFileBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}
