package main_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeReadsTheKubeletsConfigDir: serve's --config-dir merges the
// kubelet's *.conf drop-ins over --config as the kubelet does: the policy
// and the runtimeRequestTimeout of the last drop-in setting them are
// serve's, a file of another extension is not read.
func TestServeReadsTheKubeletsConfigDir(t *testing.T) {
	dir := shortDir(t)
	cfg := filepath.Join(dir, "config.yaml")
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	require.NoError(t, os.WriteFile(cfg, []byte(head+"imagePullCredentialsVerificationPolicy: NeverVerify\n"), 0o600))
	confDir := filepath.Join(dir, "conf.d")
	require.NoError(t, os.MkdirAll(confDir, 0o700))
	for name, data := range map[string]string{
		"10-a.conf":      head + "imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages\nruntimeRequestTimeout: 20s\n",
		"20-b.conf":      head + "imagePullCredentialsVerificationPolicy: AlwaysVerify\n",
		"30-c.conf.save": head + "imagePullCredentialsVerificationPolicy: NeverVerify\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(confDir, name), []byte(data), 0o600))
	}
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded", "--config", cfg, "--config-dir", confDir)
	code, body := d.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok: protecting (policy AlwaysVerify)", body)
	assert.Contains(t, d.out.String(), "--registry-request-timeout is 10s", "half the drop-in's runtimeRequestTimeout")
	require.Equal(t, 0, d.stop(t))
}
