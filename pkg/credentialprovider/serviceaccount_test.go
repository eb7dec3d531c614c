package credentialprovider_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/featuregates"
	"github.com/pullguard/pullguard/pkg/credential"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// fakeTokens is a ServiceAccountTokenSource over fixed service accounts
// ("namespace/name" keys). Tokens are "token-for-<pod>", or one per
// service account when perServiceAccount is set.
type fakeTokens map[string]cp.ServiceAccountInfo

func (f fakeTokens) ServiceAccount(_ context.Context, namespace, name string) (cp.ServiceAccountInfo, error) {
	sa, ok := f[namespace+"/"+name]
	if !ok {
		return cp.ServiceAccountInfo{}, errors.New("not found")
	}
	return sa, nil
}

func (f fakeTokens) Token(_ context.Context, req cp.TokenRequest) (string, error) {
	return "token-for-" + req.PodName + "-" + req.Audience, nil
}

// countingTokens counts Token calls.
type countingTokens struct {
	fakeTokens
	mu    sync.Mutex
	calls int
}

func (c *countingTokens) Token(ctx context.Context, req cp.TokenRequest) (string, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.fakeTokens.Token(ctx, req)
}

func (c *countingTokens) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func saProvider(e *env, cacheType cp.TokenCacheType, requireSA bool, required, optional []string) cp.Provider {
	p := e.provider("sa", []string{"registry.example"}, time.Hour, "-mode", "echo-sa")
	p.TokenAttributes = &cp.TokenAttributes{
		Audience:               "registry.example",
		CacheType:              cacheType,
		RequireServiceAccount:  requireSA,
		RequiredAnnotationKeys: required,
		OptionalAnnotationKeys: optional,
	}
	return p
}

func TestServiceAccountMode(t *testing.T) {
	tokens := fakeTokens{
		"ns/builder": {UID: "uid-builder", Annotations: map[string]string{"example.com/role": "pull", "example.com/tier": "gold", "other": "x"}},
		"ns/plain":   {UID: "uid-plain", Annotations: map[string]string{}},
	}
	saSource := func(name, uid string) credential.Source {
		return credential.Source{Kind: credential.SourceServiceAccount, Namespace: "ns", Name: name, UID: uid}
	}
	tests := []struct {
		name      string
		requireSA bool
		required  []string
		optional  []string
		pod       cp.PodInfo
		want      []wantCred
		wantErrIs error
		wantErr   string
		wantRuns  []string
	}{
		{
			name:      "token and annotations are passed; source is the service account",
			requireSA: true,
			required:  []string{"example.com/role"},
			optional:  []string{"example.com/tier", "example.com/absent"},
			pod:       cp.PodInfo{Namespace: "ns", Name: "pod1", UID: "pod-uid", ServiceAccountName: "builder"},
			want: []wantCred{{
				user: "example.com/role=pull;example.com/tier=gold", pass: "exchanged:token-for-pod1-registry.example",
				registry: "registry.example", source: saSource("builder", "uid-builder"),
			}},
			wantRuns: []string{"registry.example/app token=yes"},
		},
		{
			name:      "missing required annotation is an error naming it, and nothing runs",
			requireSA: true,
			required:  []string{"example.com/role"},
			pod:       cp.PodInfo{Namespace: "ns", Name: "pod1", ServiceAccountName: "plain"},
			wantErrIs: cp.ErrMissingAnnotation,
			wantErr:   `"example.com/role"`,
		},
		{
			name:      "unknown service account",
			requireSA: true,
			pod:       cp.PodInfo{Namespace: "ns", Name: "pod1", ServiceAccountName: "ghost"},
			wantErrIs: cp.ErrServiceAccount,
			wantErr:   "ns/ghost",
		},
		{
			name:      "pod without a service account skips a provider that requires one",
			requireSA: true,
			pod:       cp.PodInfo{Namespace: "ns", Name: "static"},
		},
		{
			name:      "pod without a service account runs the plugin without a token",
			requireSA: false,
			pod:       cp.PodInfo{Namespace: "ns", Name: "static"},
			want:      []wantCred{{user: "", pass: "", registry: "registry.example", source: nodeSource("sa")}},
			wantRuns:  []string{"registry.example/app token=no"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager(t, []cp.Provider{saProvider(e, cp.TokenCacheServiceAccount, tt.requireSA, tt.required, tt.optional)},
				cp.WithServiceAccountTokenSource(tokens))
			got, err := m.ForPod(tt.pod).Lookup(bg, "registry.example/app")
			if tt.wantErrIs != nil {
				require.Error(t, err)
				assert.ErrorIs(t, err, tt.wantErrIs)
				assert.Contains(t, err.Error(), tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			assertCreds(t, e.hasher, got, tt.want)
			assert.Equal(t, tt.wantRuns, e.runs(t))
		})
	}
}

func TestServiceAccountCacheKeys(t *testing.T) {
	tests := []struct {
		name           string
		cacheType      cp.TokenCacheType
		pods           []cp.PodInfo
		annotate       func(tokens fakeTokens) // applied before the last look-up
		wantRuns       int
		wantTokenCalls int
	}{
		{
			name:      "ServiceAccount: pods of one service account share an entry; tokens minted only to run",
			cacheType: cp.TokenCacheServiceAccount,
			pods: []cp.PodInfo{
				{Namespace: "ns", Name: "a", ServiceAccountName: "sa1"},
				{Namespace: "ns", Name: "b", ServiceAccountName: "sa1"},
			},
			wantRuns:       1,
			wantTokenCalls: 1,
		},
		{
			name:      "ServiceAccount: another service account runs again",
			cacheType: cp.TokenCacheServiceAccount,
			pods: []cp.PodInfo{
				{Namespace: "ns", Name: "a", ServiceAccountName: "sa1"},
				{Namespace: "ns", Name: "b", ServiceAccountName: "sa2"},
			},
			wantRuns:       2,
			wantTokenCalls: 2,
		},
		{
			name:      "ServiceAccount: a changed annotation value runs again",
			cacheType: cp.TokenCacheServiceAccount,
			pods: []cp.PodInfo{
				{Namespace: "ns", Name: "a", ServiceAccountName: "sa1"},
				{Namespace: "ns", Name: "a", ServiceAccountName: "sa1"},
			},
			annotate: func(tokens fakeTokens) {
				tokens["ns/sa1"] = cp.ServiceAccountInfo{UID: "uid1", Annotations: map[string]string{"example.com/role": "push"}}
			},
			wantRuns:       2,
			wantTokenCalls: 2,
		},
		{
			name:      "Token: each pod's token has its own entry",
			cacheType: cp.TokenCacheToken,
			pods: []cp.PodInfo{
				{Namespace: "ns", Name: "a", ServiceAccountName: "sa1"},
				{Namespace: "ns", Name: "b", ServiceAccountName: "sa1"},
				{Namespace: "ns", Name: "a", ServiceAccountName: "sa1"},
			},
			wantRuns:       2,
			wantTokenCalls: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tokens := &countingTokens{fakeTokens: fakeTokens{
				"ns/sa1": {UID: "uid1", Annotations: map[string]string{"example.com/role": "pull"}},
				"ns/sa2": {UID: "uid2", Annotations: map[string]string{"example.com/role": "pull"}},
			}}
			e := newEnv(t)
			m := e.manager(t, []cp.Provider{saProvider(e, tt.cacheType, true, []string{"example.com/role"}, nil)},
				cp.WithServiceAccountTokenSource(tokens))
			for i, pod := range tt.pods {
				if i == len(tt.pods)-1 && tt.annotate != nil {
					tt.annotate(tokens.fakeTokens)
				}
				got, err := m.ForPod(pod).Lookup(bg, "registry.example/app")
				require.NoError(t, err)
				require.Len(t, got, 1)
				assert.Equal(t, credential.SourceServiceAccount, got[0].Source.Kind)
				assert.Equal(t, pod.ServiceAccountName, got[0].Source.Name)
			}
			assert.Len(t, e.runs(t), tt.wantRuns)
			assert.Equal(t, tt.wantTokenCalls, tokens.count())
		})
	}
}

// TestForNodeSkipsServiceAccountProviders: the node's keyring runs only
// the providers without tokenAttributes; a service-account-token
// provider's credentials belong to one pod and it is never run for the
// node.
func TestForNodeSkipsServiceAccountProviders(t *testing.T) {
	e := newEnv(t)
	sa := saProvider(e, cp.TokenCacheServiceAccount, false, nil, nil)
	node := e.provider("node", []string{"registry.example"}, time.Hour)
	m := e.manager(t, []cp.Provider{sa, node}, cp.WithServiceAccountTokenSource(fakeTokens{}))

	got, err := m.ForNode().Lookup(bg, "registry.example/app")
	require.NoError(t, err)
	assertCreds(t, e.hasher, got, []wantCred{
		{user: "user:registry.example/app", pass: "pass:registry.example/app", registry: "registry.example", source: nodeSource("node")},
	})
	assert.Equal(t, []string{"registry.example/app token=no"}, e.runs(t), "only the node provider ran")
}

// TestNodeProvidersNeedNoTokenSource: the node's providers make a Manager
// without a service account token source.
func TestNodeProvidersNeedNoTokenSource(t *testing.T) {
	e := newEnv(t)
	cfg := &cp.Config{Providers: []cp.Provider{saProvider(e, cp.TokenCacheToken, false, nil, nil), e.provider("node", []string{"registry.example"}, time.Hour)}}
	e.install(t, "sa")
	e.install(t, "node")
	gates := cp.WithGates(featuregates.Gates{ServiceAccountTokenForCredentialProviders: true})
	_, err := cp.NewManager(cfg, e.binDir, e.hasher, gates)
	require.Error(t, err, "the service-account-token provider needs a token source")

	node := cfg.NodeProviders()
	require.Len(t, node.Providers, 1)
	assert.Equal(t, "node", node.Providers[0].Name)
	m, err := cp.NewManager(node, e.binDir, e.hasher, gates, cp.WithClock(e.clock))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	got, err := m.ForNode().Lookup(bg, "registry.example/app")
	require.NoError(t, err)
	assert.Len(t, got, 1)
}
