package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/pullguard/pullguard/internal/boundedread"
)

// maxConfigzBytes bounds the kubelet's /configz answer (a few KiB).
const maxConfigzBytes = 1 << 20

// readConfigz reads the kubelet's effective configuration from its
// /configz, through the API server's node proxy with doctor's
// --kubeconfig: {"kubeletconfig": {...}}, its files, drop-ins and flags
// merged. It returns the configuration and the API server it came
// through.
func (o *doctorOptions) readConfigz(ctx context.Context, flags map[string]kubeletFlag) (*kubeletconfig.KubeletConfiguration, string, error) {
	node := o.nodeName
	if node == "" {
		if f, ok := flags["hostname-override"]; ok && f.value != "" {
			node = f.value
		} else if h, err := os.Hostname(); err == nil {
			node = h
		}
	}
	if node == "" {
		return nil, "", errors.New("no node name: give --node-name")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
	}
	cfg.Timeout = o.timeout
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	u := cfg.Host + "/api/v1/nodes/" + url.PathEscape(node) + "/proxy/configz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	data, err := boundedread.Read(resp.Body, maxConfigzBytes)
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var doc struct {
		KubeletConfig *kubeletconfig.KubeletConfiguration `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || doc.KubeletConfig == nil {
		return nil, "", fmt.Errorf("GET %s: not the kubelet's configz ({\"kubeletconfig\": {...}}): %v", u, err)
	}
	return doc.KubeletConfig, cfg.Host + " (node " + node + ")", nil
}
