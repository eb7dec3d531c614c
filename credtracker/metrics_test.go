package credtracker_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/pullguard/pullguard/credtracker"
)

func counter(t *testing.T, r metrics.KubeRegistry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := r.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if testutil.LabelsMatch(m, labels) {
				switch {
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

func TestMetrics(t *testing.T) {
	r := metrics.NewKubeRegistry()
	r.MustRegister(credtracker.Metrics()...)

	e := newEnv(t, credtracker.Config{})
	secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
	e.pull(appImage, refApp, secret)
	e.pull("registry.example/team-a/base:1", refBase, secret)

	matchLabels := map[string]string{"action": "use", "reason": "credential_match"}
	refusedLabels := map[string]string{"action": "pull", "reason": "no_matching_credentials"}
	match0, refused0 := counter(t, r, "pullguard_credtracker_checks_total", matchLabels), counter(t, r, "pullguard_credtracker_checks_total", refusedLabels)
	e.tr.Decide(ifNotPresent(appImage, refApp, secret))
	e.tr.Decide(ifNotPresent(appImage, refApp, secret))
	e.tr.Decide(ifNotPresent(appImage, refApp))
	e.tr.Decide(credtracker.Request{Image: appImage, ImageRef: refApp, PullPolicy: corev1.PullNever})
	assert.Equal(t, 2.0, counter(t, r, "pullguard_credtracker_checks_total", matchLabels)-match0)
	assert.Equal(t, 1.0, counter(t, r, "pullguard_credtracker_checks_total", refusedLabels)-refused0)

	assert.Equal(t, 2.0, counter(t, r, "pullguard_credtracker_records", map[string]string{"location": "memory"}))
	assert.Equal(t, 2.0, counter(t, r, "pullguard_credtracker_records", map[string]string{"location": "disk"}))
	_, err := e.tr.PruneImages(nil, e.clock.Now().Add(1))
	require.NoError(t, err)
	assert.Equal(t, 0.0, counter(t, r, "pullguard_credtracker_records", map[string]string{"location": "disk"}))
}

// TestStoreSizeMetrics: the store's size in use is shown at its opening and
// grows with its writes, never past the file's size; its bound is the
// largest file start-up reads.
func TestStoreSizeMetrics(t *testing.T) {
	r := metrics.NewKubeRegistry()
	r.MustRegister(credtracker.Metrics()...)

	e := newEnv(t, credtracker.Config{})
	assert.Equal(t, float64(2<<30), counter(t, r, "pullguard_credtracker_store_max_bytes", nil))
	opened := counter(t, r, "pullguard_credtracker_store_bytes", nil)
	assert.Positive(t, opened)

	secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
	for i := range 200 {
		e.pull(fmt.Sprintf("%s/team-a/app%d:v1", reg, i), fmt.Sprintf("sha256:%064x", i+1), secret)
	}
	written := counter(t, r, "pullguard_credtracker_store_bytes", nil)
	assert.Greater(t, written, opened, "200 records take pages")
	fi, err := os.Stat(filepath.Join(e.dir, credtracker.StoreFile))
	require.NoError(t, err)
	assert.LessOrEqual(t, written, float64(fi.Size()))

	e.restart()
	reopened := counter(t, r, "pullguard_credtracker_store_bytes", nil)
	assert.GreaterOrEqual(t, reopened, written, "shown at the next opening")
	fi, err = os.Stat(filepath.Join(e.dir, credtracker.StoreFile))
	require.NoError(t, err)
	assert.LessOrEqual(t, reopened, float64(fi.Size()))
}
