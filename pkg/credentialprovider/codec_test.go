package credentialprovider_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

const v1 = "credentialprovider.kubelet.k8s.io/v1"

// secretInOutput is planted in plugin output; no error may quote it.
const secretInOutput = "hunter2-plugin-secret"

func TestDecodeResponse(t *testing.T) {
	ten := 10 * time.Minute
	zero := time.Duration(0)
	tests := []struct {
		name         string
		apiVersion   string
		body         string
		wantKeyType  string
		wantDuration *time.Duration
		wantKeys     []string
		wantErr      string
	}{
		{
			name:        "image key, no duration",
			apiVersion:  v1,
			body:        `{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"reg.example/app":{"username":"u","password":"p"}}}`,
			wantKeyType: "Image",
			wantKeys:    []string{"reg.example/app"},
		},
		{
			name:         "registry key with duration and unknown field",
			apiVersion:   v1,
			body:         `{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"10m","future":true,"auth":{"*.example":{"username":"u","password":"p"},"reg.example:5000":{}}}`,
			wantKeyType:  "Registry",
			wantDuration: &ten,
			wantKeys:     []string{"*.example", "reg.example:5000"},
		},
		{
			name:         "global key, zero duration, no auth",
			apiVersion:   "credentialprovider.kubelet.k8s.io/v1alpha1",
			body:         `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1alpha1","kind":"CredentialProviderResponse","cacheKeyType":"Global","cacheDuration":"0s"}`,
			wantKeyType:  "Global",
			wantDuration: &zero,
		},
		{
			// As the kubelet: auth keys are filed (keyring.ConfigKey) when
			// the response is used, and one that does not parse is left
			// out then; the response is not refused for it.
			name:        "auth keys are not checked",
			apiVersion:  v1,
			body:        `{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"https://reg.example":{},"reg.example/*":{},"reg example":{}}}`,
			wantKeyType: "Image",
			wantKeys:    []string{"https://reg.example", "reg.example/*", "reg example"},
		},
		{name: "empty", apiVersion: v1, body: "", wantErr: "empty output"},
		{name: "malformed JSON names the offset", apiVersion: v1, body: `{"apiVersion": "` + secretInOutput, wantErr: "malformed JSON at offset"},
		{name: "not an object", apiVersion: v1, body: `["` + secretInOutput + `"]`, wantErr: "not a JSON object"},
		{name: "wrong type", apiVersion: v1, body: `{"apiVersion":"` + v1 + `","auth":{"reg.example":{"username":7}}}`, wantErr: `field "auth" has the wrong JSON type`},
		{name: "no apiVersion", apiVersion: v1, body: `{"kind":"CredentialProviderResponse"}`, wantErr: "no apiVersion"},
		{name: "other apiVersion", apiVersion: v1, body: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}`, wantErr: "apiVersion differs from the request's"},
		{name: "wrong kind", apiVersion: v1, body: `{"apiVersion":"` + v1 + `","kind":"CredentialProviderRequest","cacheKeyType":"Image"}`, wantErr: "kind is not CredentialProviderResponse"},
		{name: "missing cacheKeyType", apiVersion: v1, body: `{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse"}`, wantErr: "no cacheKeyType"},
		{name: "bad cacheKeyType", apiVersion: v1, body: `{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"` + secretInOutput + `"}`, wantErr: "cacheKeyType is not"},
		{name: "bad duration", apiVersion: v1, body: `{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"` + secretInOutput + `"}`, wantErr: "not a duration"},
		{name: "negative duration", apiVersion: v1, body: `{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"-1s"}`, wantErr: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := cp.DecodeResponse(tt.apiVersion, []byte(tt.body))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.NotContains(t, err.Error(), secretInOutput)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantKeyType, string(r.CacheKeyType))
			assert.Equal(t, tt.wantDuration, r.CacheDuration)
			var keys []string
			for k := range r.Auth {
				keys = append(keys, k)
			}
			assert.ElementsMatch(t, tt.wantKeys, keys)
		})
	}
}

// FuzzDecodeResponse checks that decoding never panics, that an accepted
// response satisfies every documented check, and that no error quotes the
// input: a marker is planted in the input's first JSON string.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(`{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"1m","auth":{"reg.example/app":{"username":"u","password":"p"}}}`)
	f.Add(`{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Global"}`)
	f.Add(`{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{"*.example:5000":{}}}`)
	f.Add(`{"apiVersion":`)
	f.Add(`[]`)
	f.Add(`{"auth":{"x":{"username":1}}}`)
	f.Fuzz(func(t *testing.T, body string) {
		const marker = "ZQXJmarkerZQXJ"
		if strings.Contains(body, marker) {
			t.Skip()
		}
		planted := body
		if i := strings.IndexByte(body, '"'); i >= 0 {
			planted = body[:i+1] + marker + body[i+1:]
		}
		for _, in := range []string{body, planted} {
			r, err := cp.DecodeResponse(v1, []byte(in))
			if err != nil {
				assert.NotContains(t, err.Error(), marker)
				continue
			}
			var probe struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			require.NoError(t, json.Unmarshal([]byte(in), &probe))
			assert.Equal(t, v1, probe.APIVersion)
			assert.Equal(t, "CredentialProviderResponse", probe.Kind)
			assert.Contains(t, []string{"Image", "Registry", "Global"}, string(r.CacheKeyType))
			if r.CacheDuration != nil {
				assert.GreaterOrEqual(t, *r.CacheDuration, time.Duration(0))
			}
		}
	})
}
