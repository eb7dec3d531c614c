package credentialprovider_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// The cases of the kubelet's Test_ExecPluginEnvVars
// (pkg/credentialprovider/plugin/plugin_test.go, Kubernetes v1.36.3): the
// node's environment, then the configured env; a configured variable
// comes after the node's one of the same name, so it is the one the
// plugin sees.
var envCases = []struct {
	name       string
	node       []string
	configured []cp.EnvVar
	want       []string
}{
	{
		name:       "the node's environment plus the configured env",
		node:       []string{"HOME=/home/foo", "PATH=/usr/bin"},
		configured: []cp.EnvVar{{Name: "SUPER_SECRET_STRONG_ACCESS_KEY", Value: "123456789"}},
		want:       []string{"HOME=/home/foo", "PATH=/usr/bin", "SUPER_SECRET_STRONG_ACCESS_KEY=123456789"},
	},
	{
		name: "no configured env",
		node: []string{"HOME=/home/foo", "PATH=/usr/bin"},
		want: []string{"HOME=/home/foo", "PATH=/usr/bin"},
	},
	{
		name:       "no node environment",
		configured: []cp.EnvVar{{Name: "SUPER_SECRET_STRONG_ACCESS_KEY", Value: "123456789"}},
		want:       []string{"SUPER_SECRET_STRONG_ACCESS_KEY=123456789"},
	},
	{
		// The kubelet's merge gives nil here, which exec.Cmd turns into the
		// whole process environment; pullguard gives none (WithEnviron).
		name: "neither",
		want: []string{},
	},
	{
		name:       "a configured variable overrides the node's",
		node:       []string{"HOME=/home/foo", "PATH=/usr/bin", "SUPER_SECRET_STRONG_ACCESS_KEY=1111"},
		configured: []cp.EnvVar{{Name: "SUPER_SECRET_STRONG_ACCESS_KEY", Value: "123456789"}},
		want:       []string{"HOME=/home/foo", "PATH=/usr/bin", "SUPER_SECRET_STRONG_ACCESS_KEY=1111", "SUPER_SECRET_STRONG_ACCESS_KEY=123456789"},
	},
}

func TestPluginEnv(t *testing.T) {
	for _, tt := range envCases {
		t.Run(tt.name, func(t *testing.T) {
			var configured []string
			for _, v := range tt.configured {
				configured = append(configured, v.Name+"="+v.Value)
			}
			assert.Equal(t, tt.want, cp.PluginEnv(tt.node, configured))
		})
	}
}

// reported runs the test plugin in -mode env-names for names and returns
// the username it answered: TESTPLUGIN_PREFIX's value, "env:" and the names
// its environment held, in order. The plugin writes names, never values.
func reported(t *testing.T, p cp.Provider, names []string, opts ...cp.Option) string {
	t.Helper()
	e := newEnv(t)
	p.Args = append(e.provider(p.Name, p.MatchImages, p.DefaultCacheDuration).Args, "-mode", "env-names", "-env-names", strings.Join(names, ","))
	m := e.manager(t, []cp.Provider{p}, opts...)
	got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")
	require.NoError(t, err)
	require.Len(t, got, 1)
	return got[0].Auth.Username
}

// TestPluginReceivesEnvironment: what the plugin process itself receives,
// through the reaper, for the kubelet's cases.
func TestPluginReceivesEnvironment(t *testing.T) {
	names := []string{"HOME", "PATH", "SUPER_SECRET_STRONG_ACCESS_KEY", "TESTPLUGIN_PREFIX"}
	// Set in the process: a node environment given by WithEnviron
	// replaces it, even when that one is empty.
	t.Setenv("TESTPLUGIN_PREFIX", "process-")
	for _, tt := range envCases {
		t.Run(tt.name, func(t *testing.T) {
			p := cp.Provider{Name: "p", MatchImages: []string{"registry.example"}, DefaultCacheDuration: time.Minute,
				APIVersion: "credentialprovider.kubelet.k8s.io/v1", Env: tt.configured}
			got := reported(t, p, names, cp.WithEnviron(func() []string { return tt.node }))
			// One of each name, at the position of its last occurrence.
			var want []string
			for i, kv := range tt.want {
				name, _, _ := strings.Cut(kv, "=")
				if !containsName(tt.want[i+1:], name) {
					want = append(want, name)
				}
			}
			assert.Equal(t, "env:"+strings.Join(want, ","), got)
		})
	}
	t.Run("the configured value wins", func(t *testing.T) {
		p := cp.Provider{Name: "p", MatchImages: []string{"registry.example"}, DefaultCacheDuration: time.Minute,
			APIVersion: "credentialprovider.kubelet.k8s.io/v1", Env: []cp.EnvVar{{Name: "TESTPLUGIN_PREFIX", Value: "config-"}}}
		got := reported(t, p, names, cp.WithEnviron(func() []string { return []string{"TESTPLUGIN_PREFIX=node-", "HOME=/home/foo"} }))
		assert.Equal(t, "config-env:HOME,TESTPLUGIN_PREFIX", got)
	})
}

// TestPluginInheritsProcessEnvironment: by default a plugin gets
// pullguard's own environment (as an ECR plugin needs its AWS_* variables,
// the proxy settings, HOME and PATH) plus its configured env, and not the
// reaper's marker.
func TestPluginInheritsProcessEnvironment(t *testing.T) {
	for name, value := range map[string]string{"AWS_REGION": "eu-west-1", "HTTPS_PROXY": "http://proxy.example:3128", "HOME": t.TempDir(), "PATH": os.Getenv("PATH")} {
		t.Setenv(name, value)
	}
	p := cp.Provider{Name: "p", MatchImages: []string{"registry.example"}, DefaultCacheDuration: time.Minute,
		APIVersion: "credentialprovider.kubelet.k8s.io/v1", Env: []cp.EnvVar{{Name: "AWS_PROFILE", Value: "example_profile"}}}
	got := reported(t, p, []string{"AWS_REGION", "HTTPS_PROXY", "HOME", "PATH", "AWS_PROFILE", "PULLGUARD_PLUGIN_REAPER"})
	require.True(t, strings.HasPrefix(got, "env:"), got)
	assert.ElementsMatch(t, []string{"AWS_REGION", "HTTPS_PROXY", "HOME", "PATH", "AWS_PROFILE"}, strings.Split(strings.TrimPrefix(got, "env:"), ","))
	assert.True(t, strings.HasSuffix(got, ",AWS_PROFILE"), "the configured env comes last: %s", got)
}

func containsName(env []string, name string) bool {
	for _, kv := range env {
		if n, _, _ := strings.Cut(kv, "="); n == name {
			return true
		}
	}
	return false
}
