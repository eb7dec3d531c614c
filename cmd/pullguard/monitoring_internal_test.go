package main

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/component-base/metrics"
)

// The files of deploy/monitoring, tested here because serve's metrics are
// registered here (commonMetrics, serveMetrics): a metric renamed, retyped
// or relabeled in the code breaks these tests, not the alerts.
const (
	monitoringDir  = "../../deploy/monitoring/"
	ruleFile       = monitoringDir + "prometheus-rule.yaml"
	ruleTestFile   = monitoringDir + "tests/prometheus-rule-test.yaml"
	scrapeFile     = monitoringDir + "prometheus-scrape.yaml"
	rbacFile       = monitoringDir + "prometheus-rbac.yaml"
	dashboardFile  = monitoringDir + "grafana-dashboard.json"
	operationsFile = "../../docs/operations.md"
)

// metricInfo is what serve's registry says of one metric.
type metricInfo struct {
	typ    string // counter, gauge, histogram
	labels map[string]bool
}

// descLabels reads the variable labels out of a metric's Desc: client_golang
// prints them last, "variableLabels: {a,b}}" (a label with a constraint as
// "c(a)").
var descLabels = regexp.MustCompile(`variableLabels: \{([^{}]*)\}\}$`)

// serveRegistry returns every metric serve registers, by name.
func serveRegistry(t *testing.T) map[string]metricInfo {
	t.Helper()
	reg := metrics.NewKubeRegistry() // creates each lazy metric, so that it describes itself
	known := map[string]metricInfo{}
	for _, m := range append(commonMetrics(), serveMetrics()...) {
		require.NoError(t, reg.Register(m))
		var typ string
		switch m.(type) {
		case *metrics.Counter, *metrics.CounterVec:
			typ = "counter"
		case *metrics.Gauge, *metrics.GaugeVec:
			typ = "gauge"
		case *metrics.Histogram, *metrics.HistogramVec:
			typ = "histogram"
		default:
			t.Fatalf("metric %s: type %T is not one this test knows", m.FQName(), m)
		}
		descs := make(chan *prometheus.Desc, 4)
		go func() { m.Describe(descs); close(descs) }()
		n := 0
		for d := range descs {
			n++
			match := descLabels.FindStringSubmatch(d.String())
			require.NotNil(t, match, "labels of %s", d.String())
			labels := map[string]bool{}
			for _, l := range strings.Split(match[1], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					labels[l] = true
				}
			}
			known[m.FQName()] = metricInfo{typ: typ, labels: labels}
		}
		require.Equal(t, 1, n, "descriptions of %s", m.FQName())
	}
	return known
}

var (
	metricName  = regexp.MustCompile(`pullguard_[a-zA-Z0-9_]*`)
	matcherName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	rateBefore  = regexp.MustCompile(`\b(?:rate|irate|increase|delta|deriv)\(\s*$`)
)

// checkExpr returns what is wrong with the pullguard metrics that expr
// names: a name serve does not register (a histogram's by its _bucket,
// _sum or _count series), a label matcher of a label the metric does not
// have (job, instance and a bucket's le come from the scrape), or a rate
// of a gauge.
func checkExpr(known map[string]metricInfo, where, expr string) []string {
	var problems []string
	for _, loc := range metricName.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		info, ok := known[name]
		suffix := ""
		if !ok {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				if base, cut := strings.CutSuffix(name, s); cut {
					if i, found := known[base]; found && i.typ == "histogram" {
						info, ok, suffix = i, true, s
					}
				}
			}
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %s is not a metric pullguard serve registers", where, name))
			continue
		}
		if info.typ == "histogram" && suffix == "" {
			problems = append(problems, fmt.Sprintf("%s: %s is a histogram: name its _bucket, _sum or _count series", where, name))
		}
		if rateBefore.MatchString(expr[:loc[0]]) && info.typ == "gauge" {
			problems = append(problems, fmt.Sprintf("%s: %s is a gauge, not a counter: no rate of it", where, name))
		}
		if rest := expr[loc[1]:]; strings.HasPrefix(rest, "{") {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				problems = append(problems, fmt.Sprintf("%s: %s: unclosed {", where, name))
				continue
			}
			for _, m := range matcherName.FindAllStringSubmatch(rest[1:end], -1) {
				l := m[1]
				if l == "job" || l == "instance" || (l == "le" && suffix == "_bucket") || info.labels[l] {
					continue
				}
				problems = append(problems, fmt.Sprintf("%s: %s has no label %q (it has %v)", where, name, l, sortedKeys(info.labels)))
			}
		}
	}
	return problems
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestCheckExpr: the checker itself finds each kind of mistake.
func TestCheckExpr(t *testing.T) {
	known := map[string]metricInfo{
		"pullguard_a_total":          {typ: "counter", labels: map[string]bool{"kind": true}},
		"pullguard_b":                {typ: "gauge", labels: map[string]bool{}},
		"pullguard_c_seconds":        {typ: "histogram", labels: map[string]bool{"method": true}},
		"pullguard_criproxy_renamed": {typ: "gauge", labels: map[string]bool{}},
	}
	for _, tc := range []struct {
		expr string
		want int
	}{
		{`sum by (instance) (rate(pullguard_a_total{kind="window",job="pullguard"}[5m])) > 0`, 0},
		{`histogram_quantile(0.99, sum by (le) (rate(pullguard_c_seconds_bucket{method="X",le!=""}[5m])))`, 0},
		{`pullguard_b / pullguard_b > 0.8`, 0},
		{`rate(pullguard_a_totl[5m])`, 1},
		{`rate(pullguard_a_total{knd="window"}[5m])`, 1},
		{`rate(pullguard_b[5m])`, 1},
		{`pullguard_c_seconds`, 1},
		{`pullguard_b_bucket`, 1},
		{`pullguard_a_total{le="1"}`, 1},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			assert.Len(t, checkExpr(known, "test", tc.expr), tc.want)
		})
	}
}

// TestProcessStartTimeExposed: PullguardStoreRebuilt reads
// process_start_time_seconds, which serve's /metrics (gatherer) has from
// legacyregistry's process collector, not from pullguard's metric lists.
func TestProcessStartTimeExposed(t *testing.T) {
	families, err := gatherer.Gather()
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(families, func(mf *dto.MetricFamily) bool {
		return mf.GetName() == "process_start_time_seconds"
	}), "process_start_time_seconds in serve's /metrics")
}
