package credentialprovider

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	configv1 "k8s.io/kubelet/config/v1"
	configv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	configv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// The three CredentialProviderConfig versions differ only in v1's
// tokenAttributes; each is converted field by field into Provider. Fields
// whose absence only the versioned types can show (a nil duration, a nil
// requireServiceAccount) are checked here.

var providersPath = field.NewPath("providers")

func fromV1(c *configv1.CredentialProviderConfig) ([]Provider, field.ErrorList) {
	var errs field.ErrorList
	out := make([]Provider, 0, len(c.Providers))
	for i, p := range c.Providers {
		fp := providersPath.Index(i)
		env := make([]EnvVar, 0, len(p.Env))
		for _, e := range p.Env {
			env = append(env, EnvVar{Name: e.Name, Value: e.Value})
		}
		prov := common(fp, p.Name, p.MatchImages, p.DefaultCacheDuration, p.APIVersion, p.Args, env, &errs)
		if ta := p.TokenAttributes; ta != nil {
			tp := fp.Child("tokenAttributes")
			attrs := &TokenAttributes{
				Audience:               ta.ServiceAccountTokenAudience,
				CacheType:              TokenCacheType(ta.CacheType),
				RequiredAnnotationKeys: ta.RequiredServiceAccountAnnotationKeys,
				OptionalAnnotationKeys: ta.OptionalServiceAccountAnnotationKeys,
			}
			if ta.RequireServiceAccount == nil {
				errs = append(errs, field.Required(tp.Child("requireServiceAccount"), "must be true or false"))
			} else {
				attrs.RequireServiceAccount = *ta.RequireServiceAccount
			}
			prov.TokenAttributes = attrs
		}
		out = append(out, prov)
	}
	return out, errs
}

func fromV1beta1(c *configv1beta1.CredentialProviderConfig) ([]Provider, field.ErrorList) {
	var errs field.ErrorList
	out := make([]Provider, 0, len(c.Providers))
	for i, p := range c.Providers {
		env := make([]EnvVar, 0, len(p.Env))
		for _, e := range p.Env {
			env = append(env, EnvVar{Name: e.Name, Value: e.Value})
		}
		out = append(out, common(providersPath.Index(i), p.Name, p.MatchImages, p.DefaultCacheDuration, p.APIVersion, p.Args, env, &errs))
	}
	return out, errs
}

func fromV1alpha1(c *configv1alpha1.CredentialProviderConfig) ([]Provider, field.ErrorList) {
	var errs field.ErrorList
	out := make([]Provider, 0, len(c.Providers))
	for i, p := range c.Providers {
		env := make([]EnvVar, 0, len(p.Env))
		for _, e := range p.Env {
			env = append(env, EnvVar{Name: e.Name, Value: e.Value})
		}
		out = append(out, common(providersPath.Index(i), p.Name, p.MatchImages, p.DefaultCacheDuration, p.APIVersion, p.Args, env, &errs))
	}
	return out, errs
}

func common(fp *field.Path, name string, match []string, def *metav1.Duration, apiVersion string, args []string, env []EnvVar, errs *field.ErrorList) Provider {
	var d time.Duration
	if def == nil {
		*errs = append(*errs, field.Required(fp.Child("defaultCacheDuration"), "a duration such as \"10m\" (\"0s\" disables caching)"))
	} else {
		d = def.Duration
	}
	return Provider{
		Name:                 name,
		MatchImages:          match,
		DefaultCacheDuration: d,
		APIVersion:           apiVersion,
		Args:                 args,
		Env:                  env,
	}
}
