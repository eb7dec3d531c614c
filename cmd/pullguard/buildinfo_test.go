package main_test

import (
	"maps"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeMetricsCarryBuildInfo: serve's /metrics has pullguard_build_info,
// value 1, labeled as the kubelet's kubernetes_build_info, with the version
// --version prints. (A release's stamps on it: tools/release's
// TestReleaseOneArch.)
func TestServeMetricsCarryBuildInfo(t *testing.T) {
	res := pullguard(t, "--version")
	require.Equal(t, 0, res.code, res.stderr)
	gitVersion := strings.TrimSpace(strings.TrimPrefix(res.stdout, "pullguard "))

	dir := shortDir(t)
	d := startServe(t, filepath.Join(dir, "pg.sock"), filepath.Join(dir, "root"), "--image-service-endpoint", "embedded")
	code, body := d.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	family, ok := families["pullguard_build_info"]
	require.True(t, ok, "pullguard_build_info is served")
	require.Len(t, family.GetMetric(), 1)
	m := family.GetMetric()[0]
	assert.Equal(t, 1.0, m.GetGauge().GetValue())
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	assert.Equal(t, gitVersion, labels["git_version"])
	assert.Equal(t, runtime.Version(), labels["go_version"], "the test binary and pullguard are built by one toolchain")
	assert.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, labels["platform"])
	assert.Equal(t, "gc", labels["compiler"])
	assert.Equal(t, "1970-01-01T00:00:00Z", labels["build_date"], "an unstamped build has component-base's date")
	assert.ElementsMatch(t, []string{"major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"}, slices.Collect(maps.Keys(labels)))
	assert.NotContains(t, body, "kubernetes_build_info", "nothing claims to be Kubernetes")
	require.Equal(t, 0, d.stop(t))
}
