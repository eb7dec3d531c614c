package nodeconfig

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/pullguard/pullguard/featuregates"
)

// DropInExtension is the extension of the files the kubelet reads in its
// --config-dir; it skips every other file.
const DropInExtension = ".conf"

// KubeletConfig is the kubelet's configuration as the kubelet builds it
// from its --config file and its --config-dir drop-ins, before its flags.
type KubeletConfig struct {
	*kubeletconfig.KubeletConfiguration
	// Origins gives, for each top-level field set by a file, the file that
	// set it last: the one to edit.
	Origins map[string]string
	// Files are the files read, the --config file first, then the
	// drop-ins in the order the kubelet merges them.
	Files []string
	// Skipped are the files of the drop-in directory the kubelet skips
	// (their extension is not .conf).
	Skipped []string
	// Warnings are what the files set that the kubelet reads leniently.
	Warnings []string
}

// LoadKubeletConfigDir reads the kubelet's configuration as the kubelet
// v1.36 builds it (cmd/kubelet/app's mergeKubeletConfigurations): the
// --config file (file, "" for none), then, when dir is not "", each *.conf
// file of dir and its subdirectories in lexical walk order, each one a JSON
// merge patch (RFC 7386) over the configuration so far: a field it sets
// replaces the value, an object (featureGates) is merged key by key, a list
// is replaced whole, and null removes the field. A drop-in must be a
// kubelet.config.k8s.io/v1beta1 KubeletConfiguration. The kubelet merges
// over its defaulted --config file: the defaults of the fields pullguard
// reads are set before the drop-ins apply (setMergeDefaults), with
// kubeletGateOn the KubeletEnsureSecretPulledImages gate of the kubelet's
// --feature-gates flag (on when the flag does not set it), under which,
// with the configuration's own featureGates over it, the kubelet
// defaults. The kubelet's flags then override the result.
func LoadKubeletConfigDir(file, dir string, kubeletGateOn bool) (*KubeletConfig, error) {
	kc := &KubeletConfig{KubeletConfiguration: &kubeletconfig.KubeletConfiguration{}, Origins: map[string]string{}}
	if file != "" {
		cfg, keys, warnings, err := loadKubeletConfig(file)
		if err != nil {
			return nil, err
		}
		kc.KubeletConfiguration, kc.Warnings, kc.Files = cfg, warnings, []string{file}
		for _, k := range keys {
			kc.Origins[k] = file
		}
	}
	if dir == "" {
		return kc, nil
	}
	base := kc.KubeletConfiguration.DeepCopy()
	setMergeDefaults(base, kubeletGateOn)
	merged, err := json.Marshal(base)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal the kubelet configuration of %s: %w", file, err)
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if filepath.Ext(d.Name()) != DropInExtension {
			kc.Skipped = append(kc.Skipped, path)
			return nil
		}
		patch, keys, err := loadDropIn(path)
		if err != nil {
			return err
		}
		if merged, err = jsonpatch.MergePatch(merged, patch); err != nil {
			return fmt.Errorf("%w: %s: cannot be merged: %v", ErrInvalidConfig, path, err)
		}
		kc.Files = append(kc.Files, path)
		for _, k := range keys {
			kc.Origins[k] = path
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet --config-dir %s: %w", dir, err)
	}
	// As the kubelet: encoding/json, which ignores unknown fields and
	// matches names without regard to case, refusing only wrong types.
	cfg := &kubeletconfig.KubeletConfiguration{}
	if err := json.Unmarshal(merged, cfg); err != nil {
		return nil, fmt.Errorf("%w: kubelet --config-dir %s: the merged configuration: %v (a drop-in's field has the wrong type)", ErrInvalidConfig, dir, err)
	}
	setMergeDefaults(cfg, kubeletGateOn)
	kc.KubeletConfiguration = cfg
	return kc, nil
}

// setMergeDefaults sets the kubelet's v1beta1 defaults
// (SetDefaults_KubeletConfiguration) of the fields pullguard reads, as the
// kubelet has them in the configuration it merges drop-ins over: a
// drop-in's field spelled in another case then loses to the default, as
// in the kubelet.
func setMergeDefaults(c *kubeletconfig.KubeletConfiguration, gateOn bool) {
	if c.RegistryPullQPS == nil {
		c.RegistryPullQPS = ptr.To[int32](DefaultRegistryPullQPS)
	}
	if c.RegistryBurst == 0 {
		c.RegistryBurst = DefaultRegistryBurst
	}
	if c.SerializeImagePulls == nil {
		c.SerializeImagePulls = ptr.To(c.MaxParallelImagePulls == nil || *c.MaxParallelImagePulls < 2)
	}
	if c.ContainerRuntimeEndpoint == "" {
		c.ContainerRuntimeEndpoint = DefaultContainerRuntimeEndpoint
	}
	if c.RuntimeRequestTimeout.Duration == 0 {
		c.RuntimeRequestTimeout.Duration = DefaultRuntimeRequestTimeout
	}
	// The kubelet defaults under its flag's gates with the
	// configuration's own featureGates over them.
	if mine, _ := featuregates.Split(c.FeatureGates); len(mine) > 0 {
		if g, err := featuregates.Parse(mine, ""); err == nil {
			gateOn = g.EnsureSecretPulledImages
		}
	}
	if gateOn && c.ImagePullCredentialsVerificationPolicy == "" {
		c.ImagePullCredentialsVerificationPolicy = kubeletconfig.NeverVerifyPreloadedImages
	}
}

// The kubelet's defaults of its container runtime endpoint and of
// runtimeRequestTimeout (Linux, v1beta1).
const (
	DefaultContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	DefaultRuntimeRequestTimeout    = 2 * time.Minute
)

// loadDropIn reads a drop-in file as the kubelet does
// (DecodeKubeletConfigurationIntoJSON): YAML or JSON, not empty, of kind
// KubeletConfiguration, duplicated fields refused. It returns the file as
// JSON and its top-level fields.
func loadDropIn(path string) ([]byte, []string, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to read kubelet drop-in: %w", err)
	}
	if len(data) == 0 {
		return nil, nil, fmt.Errorf("%w: %s: the kubelet refuses an empty drop-in", ErrInvalidConfig, path)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: not YAML or JSON: %v", ErrInvalidConfig, path, err)
	}
	var top map[string]any
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: not a KubeletConfiguration: %v", ErrInvalidConfig, path, err)
	}
	want := kubeletconfig.SchemeGroupVersion.String()
	if av, kind := top["apiVersion"], top["kind"]; av != want || kind != "KubeletConfiguration" {
		return nil, nil, fmt.Errorf("%w: %s: not a KubeletConfiguration (apiVersion %v, kind %v; want apiVersion %s, kind KubeletConfiguration)",
			ErrInvalidConfig, path, quoteAny(av), quoteAny(kind), want)
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		if k != "apiVersion" && k != "kind" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return js, keys, nil
}
