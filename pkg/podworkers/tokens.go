package podworkers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/pullguard/pullguard/pkg/credentialprovider"
)

// ManifestTokens serves the service accounts of the manifests to
// service-account-token credential providers, and mints their tokens.
//
// With no API server there is no TokenRequest API: the tokens are unsigned
// JWTs (alg "none") carrying the claims a bound service account token
// carries (iss, sub, aud, iat, exp, and the kubernetes.io namespace,
// service account and pod). They let a plugin see which service account and
// audience it is asked for; nothing should trust them. A kubelet embedding
// pullguard supplies its token manager instead.
type ManifestTokens struct {
	m   *Manifests
	now func() time.Time
}

var _ credentialprovider.ServiceAccountTokenSource = (*ManifestTokens)(nil)

// NewManifestTokens returns a token source over m's ServiceAccounts.
func NewManifestTokens(m *Manifests) *ManifestTokens {
	return &ManifestTokens{m: m, now: time.Now}
}

// ServiceAccount implements credentialprovider.ServiceAccountTokenSource.
func (t *ManifestTokens) ServiceAccount(_ context.Context, namespace, name string) (credentialprovider.ServiceAccountInfo, error) {
	sa, ok := t.m.ServiceAccounts[types.NamespacedName{Namespace: namespace, Name: name}]
	if !ok {
		return credentialprovider.ServiceAccountInfo{}, fmt.Errorf("serviceaccount %s/%s not found in the manifests", namespace, name)
	}
	return credentialprovider.ServiceAccountInfo{UID: string(sa.UID), Annotations: sa.Annotations}, nil
}

// Token implements credentialprovider.ServiceAccountTokenSource.
func (t *ManifestTokens) Token(ctx context.Context, req credentialprovider.TokenRequest) (string, error) {
	info, err := t.ServiceAccount(ctx, req.Namespace, req.ServiceAccountName)
	if err != nil {
		return "", err
	}
	now := t.now().Unix()
	claims := map[string]any{
		"iss": "pullguard",
		"sub": "system:serviceaccount:" + req.Namespace + ":" + req.ServiceAccountName,
		"aud": []string{req.Audience},
		"iat": now,
		"exp": now + 3600,
		"kubernetes.io": map[string]any{
			"namespace":      req.Namespace,
			"serviceaccount": map[string]string{"name": req.ServiceAccountName, "uid": info.UID},
			"pod":            map[string]string{"name": req.PodName, "uid": req.PodUID},
		},
	}
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc.EncodeToString(body) + ".", nil
}
