package registry_test

import (
	"errors"
	"net/http"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/pullguard/pullguard/pkg/registry"
)

func TestStopAndStartOnTheSamePort(t *testing.T) {
	r := newRegistry(t, fixture())
	imgs := seeded(t, r)
	addr := r.Addr()
	path := "/v2/team-a/app/manifests/v1"

	require.NoError(t, r.Stop())
	require.NoError(t, r.Stop(), "stopping twice is fine")
	_, err := http.Head(r.URL() + path)
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "a stopped registry refuses connections, got %v", err)

	require.NoError(t, r.Start())
	require.NoError(t, r.Start(), "starting a running registry is fine")
	assert.Equal(t, addr, r.Addr())
	req, err := http.NewRequest(http.MethodHead, r.URL()+path, nil)
	require.NoError(t, err)
	req.SetBasicAuth(alice, password(alice))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, imgs["team-a/app"].Digest, resp.Header.Get("Docker-Content-Digest"), "same content after a restart")
}

func TestStartAfterClose(t *testing.T) {
	r, err := registry.New(registry.Config{}, registry.WithBcryptCost(bcrypt.MinCost))
	require.NoError(t, err)
	require.NoError(t, r.Close())
	assert.ErrorIs(t, r.Start(), registry.ErrClosed)
}

func TestWithAddrFixesThePort(t *testing.T) {
	first := newRegistry(t, registry.Config{})
	addr := first.Addr()
	require.NoError(t, first.Close())

	second := newRegistry(t, registry.Config{}, registry.WithAddr(addr))
	assert.Equal(t, addr, second.Addr())
	_, err := registry.New(registry.Config{}, registry.WithAddr(addr), registry.WithBcryptCost(bcrypt.MinCost))
	assert.ErrorContains(t, err, "failed to listen on "+addr, "the port is taken")
}

func TestSetDown(t *testing.T) {
	r := newRegistry(t, fixture())
	seeded(t, r)
	path := "/v2/team-a/app/manifests/v1"

	r.SetDown(true)
	for _, user := range []string{alice, ""} {
		res := call(t, r, http.MethodGet, path, user, "")
		assert.Equal(t, http.StatusServiceUnavailable, res.status)
		assert.Equal(t, []string{registry.CodeUnavailable}, res.codes)
	}
	assert.Equal(t, 2, r.Count(registry.Filter{Kind: registry.KindManifest, Status: http.StatusServiceUnavailable}))

	r.SetDown(false)
	assert.Equal(t, http.StatusOK, call(t, r, http.MethodGet, path, alice, "").status)
}

func TestServedByHTTPTest(t *testing.T) {
	r := newRegistry(t, fixture())
	seeded(t, r)
	// The Registry is an http.Handler; the same rules apply to any server.
	req, err := http.NewRequest(http.MethodGet, "/v2/", nil)
	require.NoError(t, err)
	w := newRecorder()
	r.ServeHTTP(w, req)
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, registry.Challenge, w.Header().Get("WWW-Authenticate"))
}
