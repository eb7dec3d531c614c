package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/pullguard/pullguard/internal/durable/durabletest"
)

// TestMetricsFileIsReplacedWhole shows the order of the metrics file's
// write: written, renamed over the old file; on purpose without an fsync.
func TestMetricsFileIsReplacedWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "metrics.prom")
	require.NoError(t, os.WriteFile(path, []byte("# an earlier run's\n"), 0o644))
	rec := durabletest.Record(t, dir)

	require.NoError(t, writeMetricsFile(path))

	assert.Equal(t, [][]string{{durabletest.StepCreate, durabletest.StepChmod, durabletest.StepWrite, durabletest.StepClose, durabletest.StepRename}}, rec.Writes(path), "operations: %v", rec.Ops())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	_, err = parser.TextToMetricFamilies(bytes.NewReader(data))
	assert.NoError(t, err, "the file is Prometheus text format")
}

// TestNoAPIServerMetrics: what k8s.io/apiserver registers in
// legacyregistry when imported (the secure endpoint's packages) is in
// neither the metrics file nor /metrics: pullguard is no API server.
func TestNoAPIServerMetrics(t *testing.T) {
	registerMetrics()
	all, err := legacyregistry.DefaultGatherer.Gather()
	require.NoError(t, err)
	var dropped []string
	for _, mf := range all {
		for _, prefix := range apiServerFamilies {
			if strings.HasPrefix(mf.GetName(), prefix) {
				dropped = append(dropped, mf.GetName())
			}
		}
	}
	require.NotEmpty(t, dropped, "the import registers them: the filter has something to do")

	var file bytes.Buffer
	require.NoError(t, writeMetrics(&file))
	rec := httptest.NewRecorder()
	metricsHTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	for name, out := range map[string]string{"the metrics file": file.String(), "/metrics": rec.Body.String()} {
		assert.Contains(t, out, "\npullguard_build_info{", name)
		for _, family := range dropped {
			assert.NotContains(t, out, family, name)
		}
	}
}
