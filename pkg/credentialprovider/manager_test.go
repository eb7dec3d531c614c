package credentialprovider_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/featuregates"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// good returns the credential the test plugin answers for image under key.
func good(key, image, registry, plugin string) wantCred {
	return wantCred{user: "user:" + key, pass: "pass:" + image, registry: registry, source: nodeSource(plugin)}
}

func TestLookupRunsMatchingProviders(t *testing.T) {
	tests := []struct {
		name      string
		image     string
		want      []wantCred
		wantRuns  int
		wantError bool
	}{
		{
			name:     "tag and digest are dropped; the request names the repository",
			image:    "registry.example/team/app:v1",
			want:     []wantCred{good("registry.example/team/app", "registry.example/team/app", "registry.example", "p")},
			wantRuns: 1,
		},
		{
			// matchImages are globs matched case-sensitively, as the
			// kubelet's URLsMatchStr matches them.
			name:     "registry host compared case-sensitively",
			image:    "Registry.Example/team/app@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			wantRuns: 0,
		},
		{name: "image of another registry runs nothing", image: "other.example/team/app", wantRuns: 0},
		{name: "Docker Hub image runs nothing", image: "alpine", wantRuns: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute)})
			got, err := m.ForPod(cp.PodInfo{Namespace: "ns", Name: "pod"}).Lookup(bg, tt.image)
			require.NoError(t, err)
			assertCreds(t, e.hasher, got, tt.want)
			assert.Len(t, e.runs(t), tt.wantRuns)
		})
	}
}

// TestLookupOrder: the answers of all providers are filed in one keyring,
// as the kubelet files them, so their keys are ordered together (reverse
// lexical order), whichever provider gave them.
func TestLookupOrder(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t, []cp.Provider{
		e.provider("first", []string{"*.example"}, time.Minute, "-auth-keys", "*.example,registry.example,registry.example/team,registry.example/nomatch"),
		e.provider("second", []string{"registry.example"}, time.Minute),
	})
	const img = "registry.example/team/app"
	got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, img)
	require.NoError(t, err)
	assertCreds(t, e.hasher, got, []wantCred{
		good(img, img, "registry.example", "second"),
		good("registry.example/team", img, "registry.example", "first"),
		good("registry.example", img, "registry.example", "first"),
		good("*.example", img, "registry.example", "first"),
	})
}

func TestCacheKeyTypes(t *testing.T) {
	images := []string{"a.example/x", "a.example/x:v2", "a.example/y", "b.example/z", "a.example/x"}
	tests := []struct {
		name     string
		keyType  string
		authKeys string
		wantRuns []string
	}{
		{name: "Image", keyType: "Image", authKeys: "{image}", wantRuns: []string{"a.example/x", "a.example/y", "b.example/z"}},
		{name: "Registry", keyType: "Registry", authKeys: "{registry}", wantRuns: []string{"a.example/x", "b.example/z"}},
		{name: "Global", keyType: "Global", authKeys: "*.example", wantRuns: []string{"a.example/x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager(t, []cp.Provider{e.provider("p", []string{"*.example"}, time.Hour, "-key-type", tt.keyType, "-auth-keys", tt.authKeys)})
			kr := m.ForPod(cp.PodInfo{})
			for _, img := range images {
				got, err := kr.Lookup(bg, img)
				require.NoError(t, err)
				assert.Len(t, got, 1, "credentials for %s", img)
			}
			var ran []string
			for _, r := range e.runs(t) {
				ran = append(ran, r[:len(r)-len(" token=no")])
			}
			assert.Equal(t, tt.wantRuns, ran)
		})
	}
}

func TestCacheDuration(t *testing.T) {
	tests := []struct {
		name         string
		defaultCache time.Duration
		respDuration string
		// runs after look-ups at 0, 59s and 60s on the clock
		wantRuns []int
	}{
		{name: "default duration", defaultCache: time.Minute, wantRuns: []int{1, 1, 2}},
		{name: "response duration wins", defaultCache: time.Hour, respDuration: "1m", wantRuns: []int{1, 1, 2}},
		{name: "response zero disables caching", defaultCache: time.Hour, respDuration: "0s", wantRuns: []int{1, 2, 3}},
		{name: "response negative disables caching", defaultCache: time.Hour, respDuration: "-1m", wantRuns: []int{1, 2, 3}},
		{name: "default zero disables caching", defaultCache: 0, wantRuns: []int{1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			args := []string{}
			if tt.respDuration != "" {
				args = append(args, "-duration", tt.respDuration)
			}
			// A janitor that never ticks: expiry must hold on its own.
			m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, tt.defaultCache, args...)}, cp.WithJanitorInterval(24*time.Hour))
			kr := m.ForPod(cp.PodInfo{})
			for i, step := range []time.Duration{0, 59 * time.Second, time.Second} {
				e.clock.Step(step)
				got, err := kr.Lookup(bg, "registry.example/app")
				require.NoError(t, err)
				assert.Len(t, got, 1)
				assert.Len(t, e.runs(t), tt.wantRuns[i], "runs after look-up %d", i)
			}
		})
	}
}

func TestJanitorRemovesExpiredEntries(t *testing.T) {
	e := newEnv(t)
	swept := make(chan int, 10)
	m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, 30*time.Second)},
		cp.WithJanitorInterval(time.Minute), cp.WithSweepHook(func(n int) { swept <- n }))
	_, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
	require.NoError(t, err)
	entries, _ := m.CacheSize("p")
	require.Equal(t, 1, entries)

	e.clock.Step(time.Minute)
	assert.Equal(t, 1, <-swept, "entries removed by the first sweep")
	entries, _ = m.CacheSize("p")
	assert.Equal(t, 0, entries)
}

func TestNegativeCache(t *testing.T) {
	tests := []struct {
		name      string
		mode      string
		wantErrIs error
		// runs after look-ups at 0, 9s and 10s on the clock
		wantRuns  []int
		wantLast  bool // the last look-up succeeds
		ttlOption []cp.Option
	}{
		{name: "crashing plugin is not rerun within the TTL", mode: "crash", wantErrIs: cp.ErrPluginExit, wantRuns: []int{1, 1, 2}},
		{name: "plugin that recovers is used after the TTL", mode: "fail-once", wantErrIs: cp.ErrPluginExit, wantRuns: []int{1, 1, 2}, wantLast: true},
		{name: "TTL zero disables negative caching", mode: "crash", wantErrIs: cp.ErrPluginExit, wantRuns: []int{1, 2, 3}, ttlOption: []cp.Option{cp.WithNegativeCacheTTL(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute, "-mode", tt.mode)}, tt.ttlOption...)
			kr := m.ForPod(cp.PodInfo{})
			for i, step := range []time.Duration{0, 9 * time.Second, time.Second} {
				e.clock.Step(step)
				got, err := kr.Lookup(bg, "registry.example/app")
				assert.Len(t, e.runs(t), tt.wantRuns[i], "runs after look-up %d", i)
				if i == 2 && tt.wantLast {
					assert.NoError(t, err)
					assert.Len(t, got, 1)
					continue
				}
				require.Error(t, err)
				assert.ErrorIs(t, err, tt.wantErrIs)
				if i == 1 && tt.ttlOption == nil {
					assert.ErrorIs(t, err, cp.ErrRecentFailure)
				}
			}
		})
	}
}

func TestFailingProviderDoesNotHideOthers(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t, []cp.Provider{
		e.provider("broken", []string{"registry.example"}, time.Minute, "-mode", "crash"),
		e.provider("fine", []string{"registry.example"}, time.Minute),
	})
	got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
	require.Error(t, err)
	assert.ErrorIs(t, err, cp.ErrPluginExit)
	assert.Contains(t, err.Error(), `plugin "broken"`)
	assert.Contains(t, err.Error(), "exited with status 3")
	var pe *cp.PluginError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 3, pe.ExitCode)
	assertCreds(t, e.hasher, got, []wantCred{good("registry.example/app", "registry.example/app", "registry.example", "fine")})
}

func TestRequestVersions(t *testing.T) {
	for _, v := range []string{"credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1beta1", "credentialprovider.kubelet.k8s.io/v1alpha1"} {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t)
			p := e.provider("p", []string{"registry.example"}, time.Minute)
			p.APIVersion = v
			m := e.manager(t, []cp.Provider{p})
			got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
			require.NoError(t, err)
			assert.Len(t, got, 1)
		})
	}
}

func TestArgsAndEnv(t *testing.T) {
	e := newEnv(t)
	p := e.provider("p", []string{"registry.example"}, time.Minute)
	p.Env = []cp.EnvVar{{Name: "TESTPLUGIN_PREFIX", Value: "config-"}}
	m := e.manager(t, []cp.Provider{p}, cp.WithEnviron(func() []string {
		return append(os.Environ(), "TESTPLUGIN_PREFIX=host-")
	}))
	got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
	require.NoError(t, err)
	w := good("registry.example/app", "registry.example/app", "registry.example", "p")
	w.user = "config-" + w.user
	assertCreds(t, e.hasher, got, []wantCred{w})
}

func TestNewManagerErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, e *env) (binDir string, p cp.Provider)
		opts    []cp.Option
		wantErr string
	}{
		{
			name: "missing bin dir",
			setup: func(t *testing.T, e *env) (string, cp.Provider) {
				return filepath.Join(e.binDir, "nope"), e.provider("p", []string{"a.example"}, 0)
			},
			wantErr: "bin directory",
		},
		{
			name: "missing plugin",
			setup: func(t *testing.T, e *env) (string, cp.Provider) {
				return e.binDir, e.provider("absent", []string{"a.example"}, 0)
			},
			wantErr: `provider "absent"`,
		},
		{
			name: "plugin not executable",
			setup: func(t *testing.T, e *env) (string, cp.Provider) {
				require.NoError(t, os.WriteFile(filepath.Join(e.binDir, "noexec"), []byte("#!/bin/sh\n"), 0o644))
				return e.binDir, e.provider("noexec", []string{"a.example"}, 0)
			},
			wantErr: "not executable",
		},
		{
			name: "plugin is a directory",
			setup: func(t *testing.T, e *env) (string, cp.Provider) {
				require.NoError(t, os.Mkdir(filepath.Join(e.binDir, "dir"), 0o755))
				return e.binDir, e.provider("dir", []string{"a.example"}, 0)
			},
			wantErr: "not a regular file",
		},
		{
			name: "timeout for an unknown provider",
			setup: func(t *testing.T, e *env) (string, cp.Provider) {
				e.install(t, "p")
				return e.binDir, e.provider("p", []string{"a.example"}, 0)
			},
			opts:    []cp.Option{cp.WithProviderTimeout("q", time.Second)},
			wantErr: `unknown provider "q"`,
		},
		{
			name: "tokenAttributes with the gate off",
			setup: func(t *testing.T, e *env) (string, cp.Provider) {
				e.install(t, "p")
				p := e.provider("p", []string{"a.example"}, 0)
				p.TokenAttributes = &cp.TokenAttributes{Audience: "aud", CacheType: cp.TokenCacheToken, RequireServiceAccount: true}
				return e.binDir, p
			},
			opts:    []cp.Option{cp.WithGates(featuregates.Gates{}), cp.WithServiceAccountTokenSource(fakeTokens{})},
			wantErr: "providers[0].tokenAttributes: Forbidden",
		},
		{
			name: "tokenAttributes without a token source",
			setup: func(t *testing.T, e *env) (string, cp.Provider) {
				e.install(t, "p")
				p := e.provider("p", []string{"a.example"}, 0)
				p.TokenAttributes = &cp.TokenAttributes{Audience: "aud", CacheType: cp.TokenCacheToken, RequireServiceAccount: true}
				return e.binDir, p
			},
			opts:    []cp.Option{cp.WithGates(featuregates.Gates{ServiceAccountTokenForCredentialProviders: true})},
			wantErr: "no service account token source",
		},
		{
			name: "bad option",
			setup: func(t *testing.T, e *env) (string, cp.Provider) {
				e.install(t, "p")
				return e.binDir, e.provider("p", []string{"a.example"}, 0)
			},
			opts:    []cp.Option{cp.WithOutputLimits(0, 1)},
			wantErr: "output limits",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			binDir, p := tt.setup(t, e)
			_, err := cp.NewManager(&cp.Config{Providers: []cp.Provider{p}}, binDir, e.hasher, tt.opts...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestLookupAfterClose(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute)})
	m.Close()
	m.Close() // idempotent
	_, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
	assert.Error(t, err)
}
