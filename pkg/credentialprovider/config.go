package credentialprovider

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	configv1 "k8s.io/kubelet/config/v1"
	configv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	configv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/pullguard/pullguard/featuregates"
	"github.com/pullguard/pullguard/internal/safedecode"
)

// Config is a loaded credential provider configuration: the providers of
// every file, in file-name order and then in each file's order.
type Config struct {
	Providers []Provider
	// Warnings are what validation accepted but the operator should
	// know: a matchImages entry with a wildcard in its path, which the
	// kubelet loads and never matches, is ignored and reported here.
	Warnings []string
}

// NodeProviders returns the configuration with only the providers that
// give node credentials: those without tokenAttributes (see
// Manager.ForNode). Its Warnings are c's.
func (c *Config) NodeProviders() *Config {
	out := &Config{Warnings: c.Warnings}
	for _, p := range c.Providers {
		if p.TokenAttributes == nil {
			out.Providers = append(out.Providers, p)
		}
	}
	return out
}

// Provider is one exec credential provider, whichever apiVersion of
// CredentialProviderConfig declared it.
type Provider struct {
	// Name is the plugin's executable name under the bin directory.
	Name string
	// MatchImages are the image patterns the plugin is run for.
	MatchImages []string
	// DefaultCacheDuration applies when a response sets no cacheDuration;
	// zero disables caching.
	DefaultCacheDuration time.Duration
	// APIVersion is the credentialprovider.kubelet.k8s.io version of the
	// request and of the expected response.
	APIVersion string
	// Args and Env are passed to the plugin; Env is added to the node's
	// environment and overrides variables of the same name.
	Args []string
	Env  []EnvVar
	// TokenAttributes, when set, put the provider in service-account-token
	// mode.
	TokenAttributes *TokenAttributes

	// File is the configuration file the provider came from and Index its
	// position in that file's providers list; errors use them.
	File  string
	Index int
}

// EnvVar is one environment variable for a plugin.
type EnvVar struct {
	Name  string
	Value string
}

// TokenCacheType is how credentials from a service-account-token provider
// are cached: per token or per service account.
type TokenCacheType string

// The token cache types of kubelet.config.k8s.io/v1.
const (
	TokenCacheToken          TokenCacheType = TokenCacheType(configv1.TokenServiceAccountTokenCacheType)
	TokenCacheServiceAccount TokenCacheType = TokenCacheType(configv1.ServiceAccountServiceAccountTokenCacheType)
)

// TokenAttributes configure service-account-token mode.
type TokenAttributes struct {
	// Audience is the audience of the bound service account token.
	Audience string
	// CacheType is Token or ServiceAccount.
	CacheType TokenCacheType
	// RequireServiceAccount: when true the plugin is skipped for pods
	// without a service account; when false such pods get the plugin
	// without a token.
	RequireServiceAccount bool
	// RequiredAnnotationKeys must all be present on the service account;
	// OptionalAnnotationKeys are passed when present.
	RequiredAnnotationKeys []string
	OptionalAnnotationKeys []string
}

var (
	configScheme = runtime.NewScheme()
	configCodecs = serializer.NewCodecFactory(configScheme, serializer.EnableStrict)
)

func init() {
	utilruntime.Must(configv1.AddToScheme(configScheme))
	utilruntime.Must(configv1beta1.AddToScheme(configScheme))
	utilruntime.Must(configv1alpha1.AddToScheme(configScheme))
}

// LoadConfig reads a CredentialProviderConfig from path, a file or a
// directory. For a directory, as in the kubelet, the entries named
// *.json, *.yaml or *.yml that are not directories are read, in name order
// (files reached through symbolic links count, so a mounted ConfigMap
// works); one that is not a regular file (a link to a directory, a FIFO)
// is an error, as the kubelet fails on it (or, for a FIFO, waits for
// ever); anything else, such as a README or a directory named conf.yaml,
// is ignored. Each file holds one
// CredentialProviderConfig of apiVersion kubelet.config.k8s.io/v1, v1beta1
// or v1alpha1, in JSON or YAML, decoded strictly: unknown or duplicate
// fields are errors. The result is validated (see Validate) except for the
// rules that depend on feature gates, which NewManager checks. Errors wrap
// ErrInvalidConfig and name the file and the field.
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: no path given", ErrInvalidConfig)
	}
	files, err := configFiles(path)
	if err != nil {
		return nil, err
	}
	cfg := &Config{}
	// Fields only the versioned types can show missing; reported together
	// with the validation errors of the same file.
	missing := map[string]field.ErrorList{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%w: failed to read %q: %w", ErrInvalidConfig, file, err)
		}
		providers, errs, err := decodeConfig(file, data)
		if err != nil {
			return nil, err
		}
		if len(errs) > 0 {
			missing[file] = errs
		}
		cfg.Providers = append(cfg.Providers, providers...)
	}
	if err := cfg.validate(validateOptions{missing: missing}); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Load is LoadConfig followed by Validate(gates): the whole check the
// kubelet makes at start-up, feature-gate rules included.
func Load(path string, gates featuregates.Gates) (*Config, error) {
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(gates); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Decode parses and validates one CredentialProviderConfig held in memory
// (JSON or YAML, any supported apiVersion), with the feature-gate rules of
// gates. name stands for the file in errors and in Provider.File.
func Decode(name string, data []byte, gates featuregates.Gates) (*Config, error) {
	providers, missing, err := decodeConfig(name, data)
	if err != nil {
		return nil, err
	}
	cfg := &Config{Providers: providers}
	o := validateOptions{checkGate: true, saGate: gates.ServiceAccountTokenForCredentialProviders}
	if len(missing) > 0 {
		o.missing = map[string]field.ErrorList{name: missing}
	}
	if err := cfg.validate(o); err != nil {
		return nil, err
	}
	return cfg, nil
}

// configFiles lists the files LoadConfig reads for path.
func configFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("%w: failed to read directory %q: %w", ErrInvalidConfig, path, err)
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".json", ".yaml", ".yml":
		default:
			continue
		}
		if e.IsDir() {
			continue // as the kubelet: a directory, not a link to one
		}
		// The kubelet reads every other entry, and fails on one that is
		// not a file (a link to a directory, a socket) or waits for it
		// for ever (a FIFO): refused.
		full := filepath.Join(path, e.Name())
		st, err := os.Stat(full) // follows symbolic links
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: %q in directory %q is not a regular file", ErrInvalidConfig, e.Name(), path)
		}
		files = append(files, full)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no configuration files in directory %q", ErrInvalidConfig, path)
	}
	sort.Strings(files)
	return files, nil
}

// decodeConfig strictly decodes one file into providers, and reports the
// required fields that are missing.
func decodeConfig(file string, data []byte) ([]Provider, field.ErrorList, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, nil, &ConfigError{File: file, Err: errors.New("file is empty")}
	}
	obj, gvk, err := configCodecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		// Described without quoting the file: apimachinery reports a
		// missing kind with the whole file, env values included. Strict
		// decoding errors still name the unknown or duplicate fields.
		return nil, nil, &ConfigError{File: file, Err: fmt.Errorf("cannot decode: %s", safedecode.Describe(err))}
	}
	var (
		providers []Provider
		errs      field.ErrorList
	)
	switch c := obj.(type) {
	case *configv1.CredentialProviderConfig:
		providers, errs = fromV1(c)
	case *configv1beta1.CredentialProviderConfig:
		providers, errs = fromV1beta1(c)
	case *configv1alpha1.CredentialProviderConfig:
		providers, errs = fromV1alpha1(c)
	default:
		return nil, nil, &ConfigError{File: file, Errs: field.ErrorList{
			field.NotSupported(field.NewPath("kind"), gvk.Kind, []string{"CredentialProviderConfig"}),
		}}
	}
	for i := range providers {
		providers[i].File, providers[i].Index = file, i
	}
	return providers, errs, nil
}

// ConfigError is an invalid configuration file: the file and either the
// field errors (each naming its path, such as providers[1].matchImages[0])
// or the decoding error. errors.Is(err, ErrInvalidConfig) holds.
type ConfigError struct {
	File string
	Errs field.ErrorList
	Err  error
}

// Error implements error.
func (e *ConfigError) Error() string {
	msg := ErrInvalidConfig.Error()
	if e.File != "" {
		msg += " " + strconv.Quote(e.File)
	}
	switch {
	case e.Err != nil:
		return msg + ": " + e.Err.Error()
	case len(e.Errs) > 0:
		return msg + ": " + e.Errs.ToAggregate().Error()
	}
	return msg
}

// Is reports whether target is ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Unwrap returns the decoding error, if any.
func (e *ConfigError) Unwrap() error { return e.Err }
