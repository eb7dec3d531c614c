package credentialprovider_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/leak"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

const envSecret = "env-secret-Zq9/+&\"x"

// TestConfigDecodeErrorsNeverQuoteEnv: a CredentialProviderConfig whose
// env holds a secret, wrong in each way the decoder reports, gives an
// error that names the file and never holds the secret in any form.
func TestConfigDecodeErrorsNeverQuoteEnv(t *testing.T) {
	provider := "providers:\n- name: p\n  matchImages: [r.example]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  env:\n  - {name: TOKEN, value: '" + strings.ReplaceAll(envSecret, "'", "''") + "'}\n"
	tests := []struct {
		name, content, want string
	}{
		{name: "no kind", content: "apiVersion: kubelet.config.k8s.io/v1\n" + provider, want: "kind is missing"},
		{name: "no apiVersion", content: "kind: CredentialProviderConfig\n" + provider, want: "apiVersion is missing"},
		{name: "unknown field", content: "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nsecrt: x\n" + provider, want: "secrt"},
		{name: "wrong type", content: "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n" + strings.Replace(provider, "defaultCacheDuration: 1m", "defaultCacheDuration: 1m\n  args: 5", 1), want: "cannot decode"},
		{name: "broken YAML", content: "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n" + provider + "  : [", want: "cannot decode"},
		{name: "unregistered version", content: "apiVersion: kubelet.config.k8s.io/v7\nkind: CredentialProviderConfig\n" + provider, want: "cannot decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "providers.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o600))
			_, err := cp.LoadConfig(path)
			require.ErrorIs(t, err, cp.ErrInvalidConfig)
			for _, f := range leak.Scan(map[string]string{"error": err.Error()}, envSecret) {
				assert.Fail(t, "the error holds the env secret", "as %q: %s", f.Form, err)
			}
			assert.Contains(t, err.Error(), "providers.yaml")
			assert.Contains(t, err.Error(), tt.want)
			t.Log(err)
		})
	}
}

// captureLog returns a logger at verbosity 10 and what it has logged so
// far.
func captureLog() (logr.Logger, func() string) {
	var mu sync.Mutex
	var logs strings.Builder
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10})
	return logger, func() string {
		mu.Lock()
		defer mu.Unlock()
		return logs.String()
	}
}

// TestPluginStderrIsScrubbed: a plugin that writes its env secret and the
// password it answers to stderr, in every encoding, leaves none of them
// in the log at the highest verbosity.
func TestPluginStderrIsScrubbed(t *testing.T) {
	logger, logged := captureLog()
	e := newEnv(t)
	p := e.provider("p", []string{"registry.example"}, time.Minute, "-mode", "tattle")
	p.Env = []cp.EnvVar{{Name: "TESTPLUGIN_SECRET", Value: envSecret}}
	m := e.manager(t, []cp.Provider{p}, cp.WithLogger(logger))

	got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")

	require.NoError(t, err)
	require.NotEmpty(t, got)
	answered := got[0].Auth.Password
	text := logged()
	require.Contains(t, text, "debug:", "the plugin's stderr was logged")
	for _, f := range leak.Scan(map[string]string{"log": text}, envSecret, answered) {
		assert.Fail(t, "the log holds a secret", "as %q", f.Form)
	}
}

// TestPluginPosingAsStartFailureIsScrubbed: a plugin that exits with the
// reaper's start-failure status and prefix, its env secret as the cause,
// gives an error that never holds the secret in any form.
func TestPluginPosingAsStartFailureIsScrubbed(t *testing.T) {
	e := newEnv(t)
	p := e.provider("p", []string{"registry.example"}, time.Minute, "-mode", "fake-start-failure")
	p.Env = []cp.EnvVar{{Name: "TESTPLUGIN_SECRET", Value: envSecret}}
	m := e.manager(t, []cp.Provider{p})

	_, err := m.ForPod(cp.PodInfo{}).Lookup(bg, "registry.example/app")

	require.Error(t, err)
	for _, f := range leak.Scan(map[string]string{"error": err.Error()}, envSecret) {
		assert.Fail(t, "the error holds the env secret", "as %q: %s", f.Form, err)
	}
	t.Log(err)
}

// TestRefusedAnswersNeverQuoteThem: an answer the kubelet refuses, its
// password (the test plugin's "pass:<image>") also put where a decoder's
// message would quote it (an unknown field's name, a bad cacheDuration, an
// auth key given twice, a miscased field's value), gives an error and a
// log, at the highest verbosity, that hold the password in no form.
func TestRefusedAnswersNeverQuoteThem(t *testing.T) {
	const image = "registry.example/app"
	const password = "pass:" + image
	tests := []struct{ name, extra string }{
		{name: "an unknown field named by it", extra: `"` + password + `":1`},
		{name: "a bad cacheDuration", extra: `"cacheDuration":"` + password + `"`},
		{name: "cacheKeyType twice", extra: `"cacheKeyType":"` + password + `"`},
		{name: "an auth key twice", extra: `"auth":{"` + password + `":{},"` + password + `":{}}`},
		{name: "a miscased field", extra: `"Kind":"` + password + `"`},
		{name: "an unknown field in an auth entry", extra: `"auth":{"` + image + `":{"username":"u","password":"` + password + `","` + password + `":1}}`},
		{name: "a password of the wrong type", extra: `"auth":{"` + image + `":{"username":"u","password":7}}`},
	}
	for _, tt := range tests {
		extra := tt.extra
		t.Run(tt.name, func(t *testing.T) {
			logger, logged := captureLog()
			e := newEnv(t)
			m := e.manager(t, []cp.Provider{e.provider("p", []string{"registry.example"}, time.Minute, "-extra", extra)}, cp.WithLogger(logger))

			got, err := m.ForPod(cp.PodInfo{}).Lookup(bg, image)

			require.ErrorIs(t, err, cp.ErrInvalidResponse)
			assert.Empty(t, got)
			for _, f := range leak.Scan(map[string]string{"error": err.Error(), "log": logged()}, password) {
				assert.Fail(t, "a refusal holds the password", "in %s as %q", f.Where, f.Form)
			}
		})
	}
}
