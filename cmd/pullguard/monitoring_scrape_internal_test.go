package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// scrapeFileConfig is the part of Prometheus' configuration the scrape
// file uses, decoded strictly.
type scrapeFileConfig struct {
	ScrapeConfigs []struct {
		JobName             string `json:"job_name"`
		Scheme              string `json:"scheme"`
		MetricsPath         string `json:"metrics_path"`
		ScrapeInterval      string `json:"scrape_interval"`
		KubernetesSDConfigs []struct {
			Role string `json:"role"`
		} `json:"kubernetes_sd_configs"`
		Authorization struct {
			CredentialsFile string `json:"credentials_file"`
		} `json:"authorization"`
		TLSConfig struct {
			InsecureSkipVerify bool   `json:"insecure_skip_verify"`
			CAFile             string `json:"ca_file"`
		} `json:"tls_config"`
		RelabelConfigs []relabelConfig `json:"relabel_configs"`
	} `json:"scrape_configs"`
}

type relabelConfig struct {
	SourceLabels []string `json:"source_labels"`
	Separator    *string  `json:"separator"`
	Regex        *string  `json:"regex"`
	TargetLabel  string   `json:"target_label"`
	Replacement  *string  `json:"replacement"`
	Action       string   `json:"action"`
}

// relabel applies rcs to a target's labels as Prometheus does for the
// actions the file uses (replace, labelmap, keep), and returns nil for a
// dropped target: anchored regexes, $1 or ${1} in replacements, source
// values joined by ";", a replacement that expands to "" removing the label.
func relabel(t *testing.T, rcs []relabelConfig, in map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range in {
		out[k] = v
	}
	for _, rc := range rcs {
		regex, sep, repl := "(.*)", ";", "$1"
		if rc.Regex != nil {
			regex = *rc.Regex
		}
		if rc.Separator != nil {
			sep = *rc.Separator
		}
		if rc.Replacement != nil {
			repl = *rc.Replacement
		}
		re := regexp.MustCompile("^(?:" + regex + ")$")
		var vals []string
		for _, l := range rc.SourceLabels {
			vals = append(vals, out[l])
		}
		val := strings.Join(vals, sep)
		switch rc.Action {
		case "", "replace":
			m := re.FindStringSubmatchIndex(val)
			if m == nil {
				continue
			}
			if res := string(re.ExpandString(nil, repl, val, m)); res != "" {
				out[rc.TargetLabel] = res
			} else {
				delete(out, rc.TargetLabel)
			}
		case "keep":
			if !re.MatchString(val) {
				return nil
			}
		case "labelmap":
			for k, v := range out {
				if m := re.FindStringSubmatchIndex(k); m != nil {
					out[string(re.ExpandString(nil, repl, k, m))] = v
				}
			}
		default:
			t.Fatalf("relabel action %q: not one this test knows", rc.Action)
		}
	}
	for k := range out {
		if strings.HasPrefix(k, "__meta_") {
			delete(out, k)
		}
	}
	return out
}

// TestPrometheusScrapeConfig: the job discovers nodes, scrapes serve's
// secure port on each node's InternalIP (an IPv6 one in brackets) over
// HTTPS with Prometheus' ServiceAccount token, names the node in
// instance; and, with Debian's promtool, its syntax is Prometheus' (that
// promtool has no Kubernetes discovery: it checks the job with a static
// target in its place).
func TestPrometheusScrapeConfig(t *testing.T) {
	var cfg scrapeFileConfig
	readStrict(t, scrapeFile, &cfg)
	require.Len(t, cfg.ScrapeConfigs, 1)
	job := cfg.ScrapeConfigs[0]
	assert.Equal(t, "pullguard", job.JobName, "the rules and the dashboard select it")
	assert.Equal(t, "https", job.Scheme)
	assert.Equal(t, "/metrics", job.MetricsPath)
	require.Len(t, job.KubernetesSDConfigs, 1)
	assert.Equal(t, "node", job.KubernetesSDConfigs[0].Role)
	assert.Equal(t, "/var/run/secrets/kubernetes.io/serviceaccount/token", job.Authorization.CredentialsFile)
	assert.True(t, job.TLSConfig.InsecureSkipVerify, "serve's certificate is self-signed by default")

	node := func(ip string) map[string]string {
		return map[string]string{
			"__address__": ip + ":10250", "__scheme__": "https", "__metrics_path__": "/metrics",
			"__meta_kubernetes_node_name":                      "node-a",
			"__meta_kubernetes_node_address_InternalIP":        ip,
			"__meta_kubernetes_node_label_kubernetes_io_arch":  "arm64",
			"__meta_kubernetes_node_label_kubernetes_io_os":    "linux",
			"__meta_kubernetes_node_label_team_example_com_id": "tenant-a",
		}
	}
	for _, tc := range []struct {
		ip, address string
	}{
		{"10.0.0.5", "10.0.0.5:10265"},
		{"fd00::5", "[fd00::5]:10265"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			got := relabel(t, job.RelabelConfigs, node(tc.ip))
			require.NotNil(t, got, "kept")
			assert.Equal(t, map[string]string{
				"__address__": tc.address, "__scheme__": "https", "__metrics_path__": "/metrics",
				"instance": "node-a", "kubernetes_io_arch": "arm64", "kubernetes_io_os": "linux",
			}, got)
		})
	}
	// Nodes the DaemonSet (nodeSelector kubernetes.io/os=linux) skips are
	// not scraped: they would be down forever.
	for name, osLabel := range map[string]*string{"a Windows node": ptr.To("windows"), "a node without the label": nil} {
		t.Run(name, func(t *testing.T) {
			n := node("10.0.0.6")
			delete(n, "__meta_kubernetes_node_label_kubernetes_io_os")
			if osLabel != nil {
				n["__meta_kubernetes_node_label_kubernetes_io_os"] = *osLabel
			}
			assert.Nil(t, relabel(t, job.RelabelConfigs, n), "dropped")
		})
	}
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct {
					NodeSelector map[string]string `json:"nodeSelector"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	dsData, err := os.ReadFile(filepath.Join("..", "..", "deploy", "daemonset", "daemonset.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(dsData, &ds))
	assert.Equal(t, map[string]string{"kubernetes.io/os": "linux"}, ds.Spec.Template.Spec.NodeSelector,
		"the DaemonSet's nodeSelector is the scrape job's keep: change both")

	promtool := requirePromtool(t)
	var generic map[string]any
	data, err := os.ReadFile(scrapeFile)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &generic))
	jobs := generic["scrape_configs"].([]any)
	static := jobs[0].(map[string]any)
	delete(static, "kubernetes_sd_configs")
	static["static_configs"] = []any{map[string]any{"targets": []any{"node-a:10265"}}}
	for name, tls := range map[string]any{
		"as shipped":         static["tls_config"],
		"with a CA of yours": map[string]any{"ca_file": "/etc/prometheus/pullguard/ca.crt"}, // as the file's comment shows
	} {
		static["tls_config"] = tls
		out, err := yaml.Marshal(generic)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "prometheus.yml")
		require.NoError(t, os.WriteFile(path, out, 0o644))
		res, err := exec.Command(promtool, "check", "config", "--syntax-only", path).CombinedOutput()
		require.NoError(t, err, "promtool check config, %s:\n%s", name, res)
		assert.Contains(t, string(res), "SUCCESS", name)
	}
}

// TestPrometheusRBAC: the ClusterRole grants get on the non-resource URL
// /metrics, which serve's SubjectAccessReview asks about, and the node list
// of the discovery; the binding binds it.
func TestPrometheusRBAC(t *testing.T) {
	data, err := os.ReadFile(rbacFile)
	require.NoError(t, err)
	docs := strings.Split(string(data), "\n---\n")
	require.Len(t, docs, 2)
	var role rbacv1.ClusterRole
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &role))
	var binding rbacv1.ClusterRoleBinding
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &binding))
	assert.Equal(t, "ClusterRole", role.Kind)
	assert.Contains(t, role.Rules, rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}})
	assert.Contains(t, role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}})
	assert.Equal(t, "ClusterRoleBinding", binding.Kind)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}, binding.RoleRef)
	require.Len(t, binding.Subjects, 1)
	assert.Equal(t, rbacv1.ServiceAccountKind, binding.Subjects[0].Kind)
}

// dashboard is the part of Grafana's dashboard JSON this test checks.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *dsRef          `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *dsRef `json:"datasource"`
		GridPos    struct {
			H, W, X, Y int
		} `json:"gridPos"`
		Targets []struct {
			Expr       string `json:"expr"`
			RefID      string `json:"refId"`
			Datasource *dsRef `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// TestGrafanaDashboard: the dashboard parses; its data source is a
// variable every panel and query uses; panels do not overlap; every
// pullguard metric an expression names is serve's, with those labels and
// that type; and it shows what the alerts watch.
func TestGrafanaDashboard(t *testing.T) {
	known := serveRegistry(t)
	data, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	require.NotEmpty(t, d.UID)
	variable := dsRef{Type: "prometheus", UID: "${datasource}"}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Type {
		case "datasource":
			assert.Equal(t, "datasource", v.Name)
			assert.Equal(t, `"prometheus"`, string(v.Query))
		case "query":
			require.NotNil(t, v.Datasource, v.Name)
			assert.Equal(t, variable, *v.Datasource, v.Name)
			var q struct{ Query string }
			require.NoError(t, json.Unmarshal(v.Query, &q), v.Name)
			assert.Empty(t, checkExpr(known, "variable "+v.Name, q.Query))
		}
	}
	require.True(t, vars["datasource"], "a data source variable")

	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	var exprs strings.Builder
	for _, p := range d.Panels {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		g := p.GridPos
		assert.True(t, g.W > 0 && g.H > 0 && g.X >= 0 && g.X+g.W <= 24, "%q: gridPos %+v", p.Title, g)
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		require.NotNil(t, p.Datasource, p.Title)
		assert.Equal(t, variable, *p.Datasource, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			require.NotNil(t, tg.Datasource, p.Title)
			assert.Equal(t, variable, *tg.Datasource, p.Title)
			assert.NotEmpty(t, tg.RefID, p.Title)
			require.NotEmpty(t, tg.Expr, p.Title)
			assert.Empty(t, checkExpr(known, p.Title, tg.Expr))
			exprs.WriteString(tg.Expr + "\n")
		}
	}
	for _, m := range []string{
		"pullguard_criproxy_decisions_total", "pullguard_criproxy_request_duration_seconds_bucket",
		"pullguard_serve_protection_enabled", "pullguard_criproxy_silent", "pullguard_criproxy_last_request_timestamp_seconds",
		"pullguard_credtracker_store_errors_total", "pullguard_credtracker_records",
		"pullguard_credtracker_store_bytes", "pullguard_credtracker_store_max_bytes",
		"pullguard_criproxy_answer_windows", "pullguard_criproxy_answer_windows_max", "pullguard_criproxy_evictions_total",
		"pullguard_criproxy_unannotated_presence_checks_total", "pullguard_build_info", `up{job="pullguard"}`,
	} {
		assert.True(t, strings.Contains(exprs.String(), m), "a panel shows %s", m)
	}
}
