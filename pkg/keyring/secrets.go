package keyring

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/pkg/credential"
)

// FromSecrets returns the keyring of a pod's image pull secrets, given in
// the order of the pod's imagePullSecrets. Each credential's Source is the
// secret (SourceSecret with its namespace, name and UID).
//
// Secrets of type kubernetes.io/dockerconfigjson (data key
// .dockerconfigjson, parsed by ParseDockerConfigJSON) and
// kubernetes.io/dockercfg (data key .dockercfg, parsed by ParseDockercfg)
// are read; a value in StringData (as in a manifest not yet applied)
// takes precedence over Data, as the API server would merge it.
//
// A secret that cannot be used (another type, a missing or empty data key,
// data that does not decode) is skipped whole and reported as a
// *SecretError; an entry whose key is not a valid pattern is skipped alone
// and reported the same way. The other secrets and entries still work: the
// returned keyring is never nil. Errors name the secret and the field,
// never the content. Nil secrets are ignored. h must not be nil.
func FromSecrets(h *credential.Hasher, secrets []*corev1.Secret) (Keyring, []error) {
	var (
		entries []*entry
		errs    []error
	)
	for _, s := range secrets {
		if s == nil {
			continue
		}
		fail := func(field string, err error) {
			errs = append(errs, &SecretError{
				Namespace: s.Namespace, Name: s.Name, UID: string(s.UID),
				Field: field, Err: err,
			})
		}
		var (
			key, auths string // the data key; where entries sit inside it
			parse      func([]byte) ([]ConfigEntry, error)
		)
		switch s.Type {
		case corev1.SecretTypeDockerConfigJson:
			key, auths, parse = corev1.DockerConfigJsonKey, ".auths", ParseDockerConfigJSON
		case corev1.SecretTypeDockercfg:
			key, auths, parse = corev1.DockerConfigKey, "", ParseDockercfg
		default:
			fail("type", fmt.Errorf("%w %q: want %q or %q", ErrUnsupportedSecretType,
				s.Type, corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg))
			continue
		}
		field := "data[" + key + "]"
		data := secretData(s, key)
		if len(data) == 0 {
			fail(field, fmt.Errorf("%w: no %s key or an empty one", ErrMissingSecretData, key))
			continue
		}
		parsed, err := parse(data)
		if err != nil {
			fail(field, err)
			continue
		}
		src := credential.Source{
			Kind: credential.SourceSecret, Namespace: s.Namespace, Name: s.Name, UID: string(s.UID),
		}
		for _, ce := range parsed {
			key, err := ConfigKey(ce.Key)
			if err != nil {
				fail(field+auths+"["+quoteKey(ce.Key)+"]", err)
				continue
			}
			entries = append(entries, &entry{key: key, auth: ce.Auth, source: src})
		}
	}
	return &Static{newIndex(h, entries)}, errs
}

// secretData returns the value of key, preferring StringData.
func secretData(s *corev1.Secret, key string) []byte {
	if v, ok := s.StringData[key]; ok {
		return []byte(v)
	}
	return s.Data[key]
}
