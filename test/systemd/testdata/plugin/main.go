// Command plugin is a kubelet exec credential provider plugin for the
// real-systemd suite. Run by serve, inside serve's sandbox, it reports to
// REPORT_ADDR (a TCP address of the test) that it ran, whether it could
// read the node's docker config at NODE_CONFIG, and the image asked, then
// answers NODE_USER / NODE_PASSWORD for the image's registry.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

func main() {
	// The kubelet's CredentialProviderRequest: its apiVersion and image.
	var req struct{ APIVersion, Image string }
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "bad request:", err)
		os.Exit(1)
	}
	readable := "unreadable"
	if data, err := os.ReadFile(os.Getenv("NODE_CONFIG")); err == nil && json.Valid(data) {
		readable = "readable"
	}
	etc := "writable"
	if err := os.WriteFile("/etc/pullguard-e2e-plugin", nil, 0o600); errors.Is(err, syscall.EROFS) {
		etc = "read-only"
	}
	if c, err := net.DialTimeout("tcp", os.Getenv("REPORT_ADDR"), 10*time.Second); err == nil {
		fmt.Fprintf(c, "ran uid=%d node-config=%s etc=%s image=%s\n", os.Getuid(), readable, etc, req.Image)
		c.Close()
	}
	host, _, _ := strings.Cut(req.Image, "/")
	resp := map[string]any{"apiVersion": req.APIVersion, "kind": "CredentialProviderResponse", "cacheKeyType": "Image", "cacheDuration": "0s",
		"auth": map[string]any{host: map[string]string{"username": os.Getenv("NODE_USER"), "password": os.Getenv("NODE_PASSWORD")}}}
	_ = json.NewEncoder(os.Stdout).Encode(resp)
}
