package featuregates

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
)

const (
	// EnsureSecretPulledImages makes pods prove access to images that were
	// pulled with credentials (KEP-2535). Alpha in 1.33, beta and on by
	// default in 1.35.
	EnsureSecretPulledImages featuregate.Feature = "KubeletEnsureSecretPulledImages"

	// ServiceAccountTokenForCredentialProviders lets credential provider
	// plugins receive a service account token for the pod (KEP-4412). Alpha
	// in 1.33, beta and on by default in 1.34.
	ServiceAccountTokenForCredentialProviders featuregate.Feature = "KubeletServiceAccountTokenForCredentialProviders"
)

// EmulationVersion is the Kubernetes version whose feature defaults
// pullguard follows.
const EmulationVersion = "1.35"

var specs = map[featuregate.Feature]featuregate.VersionedSpecs{
	EnsureSecretPulledImages: {
		{Version: version.MajorMinor(1, 33), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MajorMinor(1, 35), Default: true, PreRelease: featuregate.Beta},
	},
	ServiceAccountTokenForCredentialProviders: {
		{Version: version.MajorMinor(1, 33), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MajorMinor(1, 34), Default: true, PreRelease: featuregate.Beta},
	},
}

// Gates is the value the rest of pullguard receives: each gate read once.
type Gates struct {
	EnsureSecretPulledImages                  bool
	ServiceAccountTokenForCredentialProviders bool
}

// Defaults returns the gates as they are when nothing is set.
func Defaults() Gates {
	g, err := Parse(nil, "")
	if err != nil {
		// Unreachable: the specs above are static and valid.
		panic(err)
	}
	return g
}

// NewFeatureGate returns a mutable gate with pullguard's features
// registered at EmulationVersion. Callers that only need values use Parse.
func NewFeatureGate() (featuregate.MutableVersionedFeatureGate, error) {
	fg := featuregate.NewVersionedFeatureGate(version.MustParse(EmulationVersion))
	if err := fg.AddVersioned(specs); err != nil {
		return nil, fmt.Errorf("failed to register feature gates: %w", err)
	}
	return fg, nil
}

// Parse reads the gates from a configuration map (a KubeletConfiguration's
// featureGates) and then from a --feature-gates flag value
// ("A=true,B=false"), which overrides the map, as kubelet flags override
// its config file. Unknown gates and malformed values are errors that name
// them.
func Parse(fromConfig map[string]bool, flag string) (Gates, error) {
	fg, err := NewFeatureGate()
	if err != nil {
		return Gates{}, err
	}
	if len(fromConfig) > 0 {
		if err := fg.SetFromMap(fromConfig); err != nil {
			return Gates{}, fmt.Errorf("invalid featureGates in configuration: %w", err)
		}
	}
	if strings.TrimSpace(flag) != "" {
		if err := fg.Set(flag); err != nil {
			return Gates{}, fmt.Errorf("invalid --feature-gates %q: %w", flag, err)
		}
	}
	return Gates{
		EnsureSecretPulledImages:                  fg.Enabled(EnsureSecretPulledImages),
		ServiceAccountTokenForCredentialProviders: fg.Enabled(ServiceAccountTokenForCredentialProviders),
	}, nil
}

// Split divides a KubeletConfiguration's featureGates into the gates
// pullguard reads (its own, and the AllAlpha and AllBeta switches) and the
// names of the others, sorted. The file is the kubelet's: the kubelet
// checks the gates it knows, which pullguard cannot list, so a gate that
// is not pullguard's is left alone rather than refused.
func Split(fromConfig map[string]bool) (mine map[string]bool, others []string) {
	fg, err := NewFeatureGate()
	if err != nil {
		// Unreachable: the specs above are static and valid.
		panic(err)
	}
	known := fg.GetAll()
	for name, v := range fromConfig {
		if _, ok := known[featuregate.Feature(name)]; !ok {
			others = append(others, name)
			continue
		}
		if mine == nil {
			mine = map[string]bool{}
		}
		mine[name] = v
	}
	sort.Strings(others)
	return mine, others
}

// Known returns the names of pullguard's gates, sorted.
func Known() []string {
	names := make([]string, 0, len(specs))
	for f := range specs {
		names = append(names, string(f))
	}
	sort.Strings(names)
	return names
}
