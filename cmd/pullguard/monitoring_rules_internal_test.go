package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/pullguard/pullguard/internal/debpkg"
)

// prometheusRule is the part of the Prometheus Operator's PrometheusRule
// (monitoring.coreos.com/v1) the file uses, decoded strictly: a field the
// operator does not know, or one misspelled, fails. Not the operator's own
// types: they would add the operator's module to this one for one file;
// promtool checks what Prometheus reads, spec.groups.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ruleTests is promtool's unit test file, the part this one uses.
type ruleTests struct {
	RuleFiles          []string `json:"rule_files"`
	EvaluationInterval string   `json:"evaluation_interval"`
	Tests              []struct {
		Name        string `json:"name"`
		Interval    string `json:"interval"`
		InputSeries []struct {
			Series string `json:"series"`
			Values string `json:"values"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func readStrict(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(data, into), "%s", path)
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	var pr prometheusRule
	readStrict(t, ruleFile, &pr)
	require.Equal(t, "monitoring.coreos.com/v1", pr.APIVersion)
	require.Equal(t, "PrometheusRule", pr.Kind)
	var rules []rule
	for _, g := range pr.Spec.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

const runbookPrefix = "https://github.com/pullguard/pullguard/blob/main/docs/operations.md#"

// TestPrometheusRuleAlerts: every alert has a severity, a summary, a
// description that names the node (but a fleet-wide one's, of absent or
// count), and a runbook_url whose anchor is a
// subsection of docs/operations.md's "Alerts"; and every pullguard metric
// its expression names is one serve registers, with those labels and that
// type.
func TestPrometheusRuleAlerts(t *testing.T) {
	known := serveRegistry(t)
	runbooks := alertAnchors(t)
	seen := map[string]bool{}
	for _, r := range alertRules(t) {
		t.Run(r.Alert, func(t *testing.T) {
			require.NotEmpty(t, r.Alert, "only alerts: %q", r.Expr)
			assert.False(t, seen[r.Alert], "one rule per alert name")
			seen[r.Alert] = true
			assert.Contains(t, []string{"critical", "warning"}, r.Labels["severity"])
			assert.NotEmpty(t, r.Annotations["summary"])
			if !strings.HasPrefix(r.Expr, "absent(") && !strings.HasPrefix(r.Expr, "count(") { // fleet-wide: no node to name
				assert.Contains(t, r.Annotations["description"], "node {{ $labels.instance }}")
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookPrefix)
			require.True(t, ok, "runbook_url %q starts with %s", r.Annotations["runbook_url"], runbookPrefix)
			assert.Contains(t, runbooks, anchor, "a subsection of Alerts in %s", operationsFile)
			assert.Empty(t, checkExpr(known, r.Alert, r.Expr))
		})
	}
	anchored := map[string]bool{}
	for name := range seen {
		anchored[githubAnchor(name)] = true
	}
	for _, a := range runbooks {
		assert.True(t, anchored[a], "the runbook #%s is of an alert", a)
	}
}

// alertAnchors returns the anchors of the subsections (###) of the section
// "## Alerts" of docs/operations.md, as GitHub makes them.
func alertAnchors(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(operationsFile)
	require.NoError(t, err)
	var anchors []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Alerts"
		case in && strings.HasPrefix(line, "### "):
			anchors = append(anchors, githubAnchor(strings.TrimPrefix(line, "### ")))
		}
	}
	require.NotEmpty(t, anchors, "## Alerts in %s", operationsFile)
	return anchors
}

var notInAnchor = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)

// githubAnchor is the anchor GitHub gives a heading: lower case, without
// punctuation but hyphens and underscores, spaces made hyphens.
func githubAnchor(heading string) string {
	heading = strings.ReplaceAll(heading, "`", "")
	return strings.ReplaceAll(notInAnchor.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), ""), " ", "-")
}

func TestGithubAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"PullguardServeDown":                         "pullguardservedown",
		"When serve is down":                         "when-serve-is-down",
		"A registry to try it: `pullguard registry`": "a-registry-to-try-it-pullguard-registry",
		"Upgrades and downgrades":                    "upgrades-and-downgrades",
	} {
		assert.Equal(t, want, githubAnchor(heading), heading)
	}
}

// TestPrometheusRuleUnitTests: the unit test file has, for every alert, a
// case where it fires and one where it does not, and names only metrics
// serve registers; promtool checks spec.groups (check rules) and runs the
// unit tests (test rules).
func TestPrometheusRuleUnitTests(t *testing.T) {
	known := serveRegistry(t)
	var tests ruleTests
	readStrict(t, ruleTestFile, &tests)
	require.Equal(t, []string{"rules.yaml"}, tests.RuleFiles)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, s := range tc.InputSeries {
			assert.Empty(t, checkExpr(known, tc.Name, s.Series))
		}
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range alertRules(t) {
		assert.True(t, fires[r.Alert], "a case where %s fires", r.Alert)
		assert.True(t, quiet[r.Alert], "a case where %s does not fire", r.Alert)
	}

	promtool := requirePromtool(t)
	var pr prometheusRule
	readStrict(t, ruleFile, &pr)
	groups, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), groups, 0o644))
	testData, err := os.ReadFile(ruleTestFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "test.yaml"), testData, 0o644))
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %v:\n%s", args, out)
		assert.Contains(t, string(out), "SUCCESS", "promtool %v", args)
	}
}

// promtoolDir is where a test unpacks Debian's prometheus package for its
// promtool (installing the package would start a Prometheus server).
const promtoolDir = "/var/cache/pullguard-tools/prometheus"

// requirePromtool returns promtool: on $PATH, or unpacked before; with
// CI=true, as root, it unpacks Debian's prometheus package first. Without
// it the test skips, or in CI fails.
func requirePromtool(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath("promtool"); err == nil {
		return path
	}
	unpacked := filepath.Join(promtoolDir, "usr/bin/promtool")
	if _, err := os.Stat(unpacked); err == nil {
		return unpacked
	}
	if os.Getenv("CI") != "true" {
		t.Skipf("promtool is not installed (Debian's prometheus package; with CI=true the test unpacks it into %s)", promtoolDir)
	}
	require.Zero(t, os.Geteuid(), "CI=true: promtool is missing, and only root can unpack Debian's prometheus package")
	require.NoError(t, debpkg.Extract("prometheus", promtoolDir))
	return unpacked
}
