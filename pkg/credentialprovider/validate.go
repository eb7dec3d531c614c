package credentialprovider

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/pullguard/pullguard/featuregates"
)

// validateOptions choose the rules that depend on the caller.
type validateOptions struct {
	// checkGate applies the rule that tokenAttributes need the
	// ServiceAccountTokenForCredentialProviders gate, whose value is saGate.
	checkGate bool
	saGate    bool
	// missing holds, by file, required fields found missing at decoding.
	missing map[string]field.ErrorList
}

// Validate checks cfg as the kubelet does when it starts, with the
// service-account-token rules of gates. Errors wrap ErrInvalidConfig; each
// names its file and field path, such as providers[1].matchImages[0].
func (c *Config) Validate(gates featuregates.Gates) error {
	return c.validate(validateOptions{checkGate: true, saGate: gates.ServiceAccountTokenForCredentialProviders})
}

func (c *Config) validate(o validateOptions) error {
	if c == nil || len(c.Providers) == 0 {
		return &ConfigError{Errs: field.ErrorList{field.Required(providersPath, "at least one provider")}}
	}
	byFile := map[string]field.ErrorList{}
	var files []string
	add := func(file string, errs ...*field.Error) {
		if len(errs) == 0 {
			return
		}
		if _, ok := byFile[file]; !ok {
			files = append(files, file)
		}
		byFile[file] = append(byFile[file], errs...)
	}
	for i := range c.Providers {
		if f := c.Providers[i].File; o.missing[f] != nil {
			add(f, o.missing[f]...)
			delete(o.missing, f)
		}
	}
	c.Warnings = nil
	seen := map[string]*Provider{}
	for i := range c.Providers {
		p := &c.Providers[i]
		fp := providersPath.Index(p.Index)
		for j, pat := range p.MatchImages {
			if why := neverMatches(pat); why != "" {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%q: %s %q: %s", p.File, fp.Child("matchImages").Index(j), pat, why))
			}
		}
		add(p.File, validateProvider(fp, p, o)...)
		if first, dup := seen[p.Name]; dup && p.Name != "" {
			add(p.File, field.Invalid(fp.Child("name"), p.Name,
				fmt.Sprintf("provider names must be unique: also used by %s in %q", providersPath.Index(first.Index), first.File)))
		} else {
			seen[p.Name] = p
		}
	}
	errs := make([]error, 0, len(files))
	for _, f := range files {
		errs = append(errs, &ConfigError{File: f, Errs: byFile[f]})
	}
	return errors.Join(errs...)
}

// requestVersions are the supported credentialprovider.kubelet.k8s.io
// request versions.
var requestVersions = []string{
	"credentialprovider.kubelet.k8s.io/v1",
	"credentialprovider.kubelet.k8s.io/v1beta1",
	"credentialprovider.kubelet.k8s.io/v1alpha1",
}

const requestVersionV1 = "credentialprovider.kubelet.k8s.io/v1"

func validateProvider(fp *field.Path, p *Provider, o validateOptions) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateName(fp.Child("name"), p.Name)...)

	switch {
	case p.APIVersion == "":
		errs = append(errs, field.Required(fp.Child("apiVersion"), "the credentialprovider.kubelet.k8s.io version of the request"))
	case !sets.New(requestVersions...).Has(p.APIVersion):
		errs = append(errs, field.NotSupported(fp.Child("apiVersion"), p.APIVersion, requestVersions))
	}

	mp := fp.Child("matchImages")
	if len(p.MatchImages) == 0 {
		errs = append(errs, field.Required(mp, "at least one image pattern"))
	}
	for j, pat := range p.MatchImages {
		if err := validatePattern(pat); err != nil {
			errs = append(errs, field.Invalid(mp.Index(j), pat, err.Error()))
		}
	}

	if p.DefaultCacheDuration < 0 {
		errs = append(errs, field.Invalid(fp.Child("defaultCacheDuration"), p.DefaultCacheDuration.String(), "must not be negative"))
	}

	for j, e := range p.Env {
		ep := fp.Child("env").Index(j).Child("name")
		switch {
		case e.Name == "":
			errs = append(errs, field.Required(ep, ""))
		case strings.ContainsAny(e.Name, "=\x00"):
			errs = append(errs, field.Invalid(ep, e.Name, "must not contain '=' or NUL"))
		}
	}

	if p.TokenAttributes != nil {
		errs = append(errs, validateTokenAttributes(fp.Child("tokenAttributes"), p, o)...)
	}
	return errs
}

// validateName requires a plain, portable file name: the plugin is
// resolved as <bin dir>/<name> and nothing else.
func validateName(fp *field.Path, name string) field.ErrorList {
	switch {
	case name == "":
		return field.ErrorList{field.Required(fp, "the plugin's executable name")}
	case name == "." || name == "..":
		return field.ErrorList{field.Invalid(fp, name, "must be a file name")}
	case strings.ContainsAny(name, `/\`):
		return field.ErrorList{field.Invalid(fp, name, "must not contain a path separator")}
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return field.ErrorList{field.Invalid(fp, name, "must not contain spaces or control characters")}
	}
	return nil
}

func validateTokenAttributes(tp *field.Path, p *Provider, o validateOptions) field.ErrorList {
	var errs field.ErrorList
	ta := p.TokenAttributes
	if o.checkGate && !o.saGate {
		errs = append(errs, field.Forbidden(tp, "tokenAttributes need the "+string(featuregates.ServiceAccountTokenForCredentialProviders)+" feature gate"))
	}
	if p.APIVersion != "" && p.APIVersion != requestVersionV1 {
		errs = append(errs, field.Forbidden(tp, "tokenAttributes are only supported with apiVersion "+requestVersionV1))
	}
	if ta.Audience == "" {
		errs = append(errs, field.Required(tp.Child("serviceAccountTokenAudience"), "the audience of the service account token"))
	}
	if !ta.RequireServiceAccount && len(ta.RequiredAnnotationKeys) > 0 {
		errs = append(errs, field.Forbidden(tp.Child("requiredServiceAccountAnnotationKeys"), "requireServiceAccount must be true when required annotation keys are set"))
	}
	errs = append(errs, validateAnnotationKeys(tp.Child("requiredServiceAccountAnnotationKeys"), ta.RequiredAnnotationKeys)...)
	errs = append(errs, validateAnnotationKeys(tp.Child("optionalServiceAccountAnnotationKeys"), ta.OptionalAnnotationKeys)...)
	required := sets.New(ta.RequiredAnnotationKeys...)
	for j, k := range ta.OptionalAnnotationKeys {
		if required.Has(k) {
			errs = append(errs, field.Invalid(tp.Child("optionalServiceAccountAnnotationKeys").Index(j), k, "key is also in requiredServiceAccountAnnotationKeys"))
		}
	}
	cp := tp.Child("cacheType")
	switch ta.CacheType {
	case TokenCacheToken, TokenCacheServiceAccount:
	case "":
		errs = append(errs, field.Required(cp, "Token or ServiceAccount"))
	default:
		errs = append(errs, field.NotSupported(cp, string(ta.CacheType), []string{string(TokenCacheToken), string(TokenCacheServiceAccount)}))
	}
	return errs
}

// validateAnnotationKeys applies the Kubernetes rule for annotation keys
// (a qualified name, compared without regard to case) and rejects
// duplicates.
func validateAnnotationKeys(fp *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for j, k := range keys {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(fp.Index(j), k, msg))
		}
		if seen.Has(k) {
			errs = append(errs, field.Duplicate(fp.Index(j), k))
		}
		seen.Insert(k)
	}
	return errs
}
