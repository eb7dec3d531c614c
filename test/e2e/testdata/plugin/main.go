// Command e2e-credential-provider is a kubelet exec credential provider
// plugin for the e2e suite.
//
//	e2e-credential-provider node   answers NODE_USER / NODE_PASSWORD for any image
//	e2e-credential-provider sa     answers per service account: SA_CREDENTIALS
//	                               is "namespace/name=user:password;..."
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

type request struct {
	APIVersion          string `json:"apiVersion"`
	Kind                string `json:"kind"`
	Image               string `json:"image"`
	ServiceAccountToken string `json:"serviceAccountToken,omitempty"`
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
	host := req.Image
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host = host[:i]
	}
	resp := response{APIVersion: req.APIVersion, Kind: "CredentialProviderResponse", CacheKeyType: "Image", CacheDuration: "0s", Auth: map[string]authConfig{}}
	switch mode := os.Args[len(os.Args)-1]; mode {
	case "node":
		resp.Auth[host] = authConfig{Username: os.Getenv("NODE_USER"), Password: os.Getenv("NODE_PASSWORD")}
	case "sa":
		sa := subject(req.ServiceAccountToken)
		for _, entry := range strings.Split(os.Getenv("SA_CREDENTIALS"), ";") {
			who, cred, ok := strings.Cut(entry, "=")
			user, pass, ok2 := strings.Cut(cred, ":")
			if ok && ok2 && who == sa {
				resp.Auth[host] = authConfig{Username: user, Password: pass}
			}
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
	_ = json.NewEncoder(os.Stdout).Encode(resp)
}

// subject returns "namespace/name" from a service account token's sub
// claim ("system:serviceaccount:namespace:name").
func subject(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) < 2 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	f := strings.Split(claims.Sub, ":")
	if len(f) != 4 {
		return ""
	}
	return f[2] + "/" + f[3]
}
