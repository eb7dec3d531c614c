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

type request struct {
	APIVersion string `json:"apiVersion"`
	Image      string `json:"image"`
}

type authConfig struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type response struct {
	APIVersion    string                `json:"apiVersion"`
	Kind          string                `json:"kind"`
	CacheKeyType  string                `json:"cacheKeyType"`
	CacheDuration string                `json:"cacheDuration"`
	Auth          map[string]authConfig `json:"auth"`
}

func main() {
	var req request
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
	resp := response{APIVersion: req.APIVersion, Kind: "CredentialProviderResponse", CacheKeyType: "Image", CacheDuration: "0s",
		Auth: map[string]authConfig{host: {Username: os.Getenv("NODE_USER"), Password: os.Getenv("NODE_PASSWORD")}}}
	_ = json.NewEncoder(os.Stdout).Encode(resp)
}
