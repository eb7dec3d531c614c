package main_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeNoticesSilence: a serve no image service call reaches says
// so once, in its log, in /healthz (still 200: /healthz is its liveness)
// and in a metric; a call ends the silence, and that is logged too. (The
// bound is 3 s: the checks after the run come well within it.)
func TestServeNoticesSilence(t *testing.T) {
	w := newWorld(t)
	dir := shortDir(t)
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded", "--silence-bound", "3s")

	d.waitLog(t, "No image service call since serve started")
	code, body := d.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code, "out of the kubelet's path is no reason to restart serve")
	lines := strings.Split(body, "\n")
	require.Len(t, lines, 2, body)
	assert.Equal(t, "ok: protecting (policy NeverVerifyPreloadedImages)", lines[0], "the first line is unchanged")
	assert.Regexp(t, `^warning: not in the kubelet's path: no CRI image service call for 3s or more, since serve started at \S+Z: is the kubelet's imageServiceEndpoint still serve's socket\?$`, lines[1])
	_, metrics := d.get(t, "/metrics")
	assert.Contains(t, metrics, "\npullguard_criproxy_silent 1\n")
	assert.Contains(t, metrics, "\npullguard_criproxy_last_request_timestamp_seconds ")

	res := runTenantsThroughServe(t, w, d, filepath.Join(dir, "kubelet"))
	require.Equal(t, 0, res.code, res.stderr)
	d.waitLog(t, "Image service calls resumed")
	code, body = d.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok: protecting (policy NeverVerifyPreloadedImages)", body)
	_, metrics = d.get(t, "/metrics")
	assert.Contains(t, metrics, "\npullguard_criproxy_silent 0\n")
	assert.Equal(t, 1, strings.Count(d.out.String(), "No image service call"), "one warning for one silence")
}
