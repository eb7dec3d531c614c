package credentialprovider

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/pullguard/pullguard/pkg/credential"
)

// ServiceAccountTokenSource gives service-account-token providers what
// they need about a pod's service account. It is supplied by the caller
// (the kubelet's service account informer and token manager play this
// part upstream). Implementations must be safe for concurrent use; errors
// must not contain tokens.
type ServiceAccountTokenSource interface {
	// ServiceAccount returns the UID and the annotations of the service
	// account namespace/name. It is called on every look-up of a
	// service-account-token provider, so it should be served from memory.
	ServiceAccount(ctx context.Context, namespace, name string) (ServiceAccountInfo, error)
	// Token returns a service account token for req: bound to the pod,
	// for the audience. With cacheType Token it is called on every
	// look-up and its result is part of the cache key, so it should reuse
	// a token until it nears expiry, as the kubelet's token manager does;
	// with cacheType ServiceAccount it is called only when the plugin runs.
	Token(ctx context.Context, req TokenRequest) (string, error)
}

// ServiceAccountInfo is what the providers use of a service account.
type ServiceAccountInfo struct {
	UID         string
	Annotations map[string]string
}

// TokenRequest asks for a token of ServiceAccountName in Namespace, bound
// to the pod PodName/PodUID, for Audience.
type TokenRequest struct {
	Namespace          string
	ServiceAccountName string
	PodName            string
	PodUID             string
	Audience           string
}

// PodInfo identifies the pod a keyring serves.
type PodInfo struct {
	Namespace          string
	Name               string
	UID                string
	ServiceAccountName string
}

// saContext is what one look-up of a service-account-token provider knows
// about the pod's service account.
type saContext struct {
	// skip: the provider requires a service account and the pod has none.
	skip bool
	// key is the service-account part of the cache key; empty when the
	// plugin runs without a token (see Provider.TokenAttributes).
	key         string
	annotations map[string]string
	token       string // minted before the cache look-up (cacheType Token)
	withToken   bool   // the request carries a token
	source      credential.Source
	tokenReq    TokenRequest
}

// serviceAccountFor resolves the pod's service account for a provider in
// service-account-token mode. A pod without a service account skips a
// provider that requires one (silently, as the kubelet does) and runs one
// that does not without a token, as a node-level provider. A missing
// required annotation is an error that names it.
func (p *plugin) serviceAccountFor(ctx context.Context, pod PodInfo) (saContext, error) {
	ta := p.cfg.TokenAttributes
	if pod.ServiceAccountName == "" {
		if ta.RequireServiceAccount {
			return saContext{skip: true}, nil
		}
		return saContext{source: p.nodeSource}, nil
	}
	info, err := p.m.tokens.ServiceAccount(ctx, pod.Namespace, pod.ServiceAccountName)
	if err != nil {
		return saContext{}, fmt.Errorf("%w: provider %q: service account %s/%s: %w",
			ErrServiceAccount, p.cfg.Name, pod.Namespace, pod.ServiceAccountName, err)
	}
	ann := make(map[string]string, len(ta.RequiredAnnotationKeys)+len(ta.OptionalAnnotationKeys))
	for _, k := range ta.RequiredAnnotationKeys {
		v, ok := info.Annotations[k]
		if !ok {
			return saContext{}, fmt.Errorf("%w: provider %q needs annotation %q on service account %s/%s",
				ErrMissingAnnotation, p.cfg.Name, k, pod.Namespace, pod.ServiceAccountName)
		}
		ann[k] = v
	}
	for _, k := range ta.OptionalAnnotationKeys {
		if v, ok := info.Annotations[k]; ok {
			ann[k] = v
		}
	}
	sc := saContext{
		key:         serviceAccountKey(pod.Namespace, pod.ServiceAccountName, info.UID, ann),
		annotations: ann,
		withToken:   true,
		source: credential.Source{
			Kind:      credential.SourceServiceAccount,
			Namespace: pod.Namespace,
			Name:      pod.ServiceAccountName,
			UID:       info.UID,
		},
		tokenReq: TokenRequest{
			Namespace:          pod.Namespace,
			ServiceAccountName: pod.ServiceAccountName,
			PodName:            pod.Name,
			PodUID:             pod.UID,
			Audience:           ta.Audience,
		},
	}
	if ta.CacheType == TokenCacheToken {
		tok, err := p.mintToken(ctx, sc.tokenReq)
		if err != nil {
			return saContext{}, err
		}
		sc.token = tok
		sum := sha256.Sum256([]byte(tok))
		sc.key += string(sum[:])
	}
	return sc, nil
}

// mintToken asks the token source for a token; its error never includes
// the token.
func (p *plugin) mintToken(ctx context.Context, req TokenRequest) (string, error) {
	tok, err := p.m.tokens.Token(ctx, req)
	if err != nil {
		return "", fmt.Errorf("%w: provider %q: token for service account %s/%s: %w",
			ErrServiceAccount, p.cfg.Name, req.Namespace, req.ServiceAccountName, err)
	}
	if tok == "" {
		return "", fmt.Errorf("%w: provider %q: empty token for service account %s/%s",
			ErrServiceAccount, p.cfg.Name, req.Namespace, req.ServiceAccountName)
	}
	return tok, nil
}

// serviceAccountKey encodes a service account's identity and the
// annotation values passed to the plugin, each field length-prefixed so
// that no two different inputs share a key.
func serviceAccountKey(namespace, name, uid string, ann map[string]string) string {
	keys := make([]string, 0, len(ann))
	for k := range ann {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := make([]byte, 0, 64)
	add := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	add(namespace)
	add(name)
	add(uid)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		add(k)
		add(ann[k])
	}
	return string(b)
}

// ErrTokenAsCredential: a plugin in service-account-token mode answered
// with the pod's own service account token as a password. The token is
// bound to one pod and must not be presented to a registry, so the kubelet
// refuses the response; pullguard refuses it too, and caches nothing.
var ErrTokenAsCredential = errors.New("credential provider returned the pod's service account token as a credential")

// checkNotToken refuses a response that hands back the token the plugin
// was given. It compares in constant time and never prints the token.
func checkNotToken(provider string, resp *Response, token string) error {
	if resp == nil || token == "" {
		return nil
	}
	for key, a := range resp.Auth {
		if subtle.ConstantTimeCompare([]byte(a.Password), []byte(token)) == 1 {
			return fmt.Errorf("%w: provider %q, entry %q", ErrTokenAsCredential, provider, key)
		}
	}
	return nil
}
