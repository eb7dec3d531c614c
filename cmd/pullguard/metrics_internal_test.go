package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
