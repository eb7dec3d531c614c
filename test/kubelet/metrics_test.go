package kubelet

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// labelPair is one label of a sample in the Prometheus text format.
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// metricSum sums the samples of metric, in the Prometheus text format,
// whose labels include every label of want. A metric with no sample yet
// sums to 0 (a counter that was never incremented).
func metricSum(body io.Reader, metric string, want map[string]string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels := map[string]string{}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("malformed sample %q", line)
			}
			for _, m := range labelPair.FindAllStringSubmatch(rest[1:end], -1) {
				labels[m[1]] = m[2]
			}
			rest = rest[end+1:]
		}
		matches := true
		for k, v := range want {
			if labels[k] != v {
				matches = false
				break
			}
		}
		if !matches {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("malformed sample %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("sample %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// scrape sums metric's samples matching want at a /metrics URL.
func scrape(ctx context.Context, client *http.Client, url, metric string, want map[string]string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return metricSum(resp.Body, metric, want)
}

// serveMetric reads one of pullguard serve's metrics.
func (c *cluster) serveMetric(ctx context.Context, metric string, want map[string]string) (float64, error) {
	return scrape(ctx, http.DefaultClient, "http://"+c.pgMetrics+"/metrics", metric, want)
}

// kubeletMetric reads one of the kubelet's metrics from its authenticated
// server, with the admin's client certificate, checking the kubelet's
// self-signed serving certificate.
func (c *cluster) kubeletMetric(ctx context.Context, metric string, want map[string]string) (float64, error) {
	pki := filepath.Join(c.dir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return 0, err
	}
	serving, err := os.ReadFile(filepath.Join(c.dir, "kubelet-pki", "kubelet.crt"))
	if err != nil {
		return 0, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(serving) {
		return 0, fmt.Errorf("no certificate in the kubelet's kubelet.crt")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: nodeName, MinVersion: tls.VersionTLS12,
	}}}
	defer client.CloseIdleConnections()
	return scrape(ctx, client, "https://127.0.0.1:"+strconv.Itoa(c.kubeletPort)+"/metrics", metric, want)
}

func TestMetricSum(t *testing.T) {
	const body = `# HELP pullguard_criproxy_requests_total CRI image service requests by method and gRPC code.
# TYPE pullguard_criproxy_requests_total counter
pullguard_criproxy_requests_total{code="OK",method="PullImage"} 3
pullguard_criproxy_requests_total{code="Unauthenticated",method="PullImage"} 2
pullguard_criproxy_requests_total{code="OK",method="ImageStatus"} 40
pullguard_criproxy_requests_total_other{method="PullImage"} 100
kubelet_runtime_operations_total{operation_type="pull_image"} 7 1700000000000
plain_metric 1.5
`
	for _, tc := range []struct {
		name   string
		metric string
		want   map[string]string
		sum    float64
	}{
		{name: "all codes of a method", metric: "pullguard_criproxy_requests_total", want: map[string]string{"method": "PullImage"}, sum: 5},
		{name: "two labels", metric: "pullguard_criproxy_requests_total", want: map[string]string{"method": "PullImage", "code": "OK"}, sum: 3},
		{name: "every sample", metric: "pullguard_criproxy_requests_total", sum: 45},
		{name: "with a timestamp", metric: "kubelet_runtime_operations_total", want: map[string]string{"operation_type": "pull_image"}, sum: 7},
		{name: "no labels", metric: "plain_metric", sum: 1.5},
		{name: "no sample yet", metric: "pullguard_criproxy_requests_total", want: map[string]string{"method": "RemoveImage"}, sum: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := metricSum(strings.NewReader(body), tc.metric, tc.want)
			require.NoError(t, err)
			assert.Equal(t, tc.sum, got)
		})
	}
}
