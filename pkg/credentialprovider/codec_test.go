package credentialprovider_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"

	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

const v1 = "credentialprovider.kubelet.k8s.io/v1"

// secretInOutput is planted in plugin output; no error may quote it.
const secretInOutput = "hunter2-plugin-secret"

// resp returns a v1 response with the given fields after apiVersion and
// kind, written as they are.
func resp(fields string) string {
	if fields != "" {
		fields = "," + fields
	}
	return `{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse"` + fields + `}`
}

func TestDecodeResponse(t *testing.T) {
	dur := func(d time.Duration) *time.Duration { return &d }
	type auth = credentialproviderapi.AuthConfig
	tests := []struct {
		name         string
		apiVersion   string // v1 when empty
		body         string
		wantKeyType  string
		wantDuration *time.Duration
		wantAuth     map[string]auth
		wantErr      string
	}{
		{
			name:        "image key, no duration",
			body:        resp(`"cacheKeyType":"Image","auth":{"reg.example/app":{"username":"u","password":"p"}}`),
			wantKeyType: "Image",
			wantAuth:    map[string]auth{"reg.example/app": {Username: "u", Password: "p"}},
		},
		{
			name:         "registry key with duration, keys unchecked",
			body:         resp(`"cacheKeyType":"Registry","cacheDuration":"1h30m","auth":{"*.example":{"username":"u","password":"p"},"reg.example:5000":{},"https://reg.example":{},"reg example":{}}`),
			wantKeyType:  "Registry",
			wantDuration: dur(90 * time.Minute),
			wantAuth:     map[string]auth{"*.example": {Username: "u", Password: "p"}, "reg.example:5000": {}, "https://reg.example": {}, "reg example": {}},
		},
		{
			name:         "v1alpha1, global key, zero duration, no auth",
			apiVersion:   "credentialprovider.kubelet.k8s.io/v1alpha1",
			body:         `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1alpha1","kind":"CredentialProviderResponse","cacheKeyType":"Global","cacheDuration":"0s"}`,
			wantKeyType:  "Global",
			wantDuration: dur(0),
		},
		{
			name:         "v1beta1",
			apiVersion:   "credentialprovider.kubelet.k8s.io/v1beta1",
			body:         `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","cacheKeyType":"Image","cacheDuration":"5m"}`,
			wantKeyType:  "Image",
			wantDuration: dur(5 * time.Minute),
		},
		{
			// The kubelet reads a negative duration and stores the
			// answer already expired: it is not cached.
			name:         "negative duration",
			body:         resp(`"cacheKeyType":"Image","cacheDuration":"-1m"`),
			wantKeyType:  "Image",
			wantDuration: dur(-time.Minute),
		},
		{
			name:        "nulls: auth entry, cacheDuration, username",
			body:        resp(`"cacheKeyType":"Image","cacheDuration":null,"auth":{"a.example":null,"b.example":{"username":null,"password":"p"}}`),
			wantKeyType: "Image",
			wantAuth:    map[string]auth{"a.example": {}, "b.example": {Password: "p"}},
		},
		{
			name:        "null auth, white space around",
			body:        " \n\t" + resp(`"cacheKeyType":"Image","auth":null`) + "\n\r ",
			wantKeyType: "Image",
		},
		{
			// Both the kubelet's decoder and encoding/json replace each
			// invalid byte with U+FFFD.
			name:        "invalid UTF-8 in a password",
			body:        resp(`"cacheKeyType":"Image","auth":{"a.example":{"username":"u","password":"p` + "\xff" + `"}}`),
			wantKeyType: "Image",
			wantAuth:    map[string]auth{"a.example": {Username: "u", Password: "p\uFFFD"}},
		},

		{name: "empty", body: "", wantErr: "empty output"},
		{name: "malformed JSON names the offset", body: `{"apiVersion": "` + secretInOutput, wantErr: "malformed JSON at offset"},
		{name: "a second object", body: resp(`"cacheKeyType":"Image"`) + resp(`"cacheKeyType":"Image","auth":{"x":{"password":"`+secretInOutput+`"}}`), wantErr: "malformed JSON at offset"},
		{name: "YAML", body: "apiVersion: " + v1 + "\nkind: CredentialProviderResponse\ncacheKeyType: Image\n", wantErr: "malformed JSON at offset"},
		{name: "not an object", body: `["` + secretInOutput + `"]`, wantErr: "not a JSON object"},
		{name: "null", body: `null`, wantErr: "no apiVersion"},
		{name: "apiVersion not a string", body: `{"apiVersion":7}`, wantErr: "field apiVersion has the wrong JSON type"},
		{name: "apiVersion not a group/version", body: `{"apiVersion":"a/b/` + secretInOutput + `"}`, wantErr: "apiVersion is not a group/version"},
		{name: "no apiVersion", body: `{"kind":"CredentialProviderResponse"}`, wantErr: "no apiVersion"},
		{name: "other apiVersion", body: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}`, wantErr: "apiVersion differs from the request's"},
		{name: "no kind", body: `{"apiVersion":"` + v1 + `","cacheKeyType":"Image","auth":{"x":{"password":"` + secretInOutput + `"}}}`, wantErr: "response has no kind"},
		{name: "request kind", body: `{"apiVersion":"` + v1 + `","kind":"CredentialProviderRequest","cacheKeyType":"Image"}`, wantErr: "kind is not CredentialProviderResponse"},
		{name: "unregistered kind", body: `{"apiVersion":"` + v1 + `","kind":"` + secretInOutput + `"}`, wantErr: "kind is not CredentialProviderResponse"},
		{name: "missing cacheKeyType", body: resp(``), wantErr: "no cacheKeyType"},
		{name: "bad cacheKeyType", body: resp(`"cacheKeyType":"` + secretInOutput + `"`), wantErr: "cacheKeyType is not"},
		{name: "cacheKeyType in another case", body: resp(`"cacheKeyType":"image"`), wantErr: "cacheKeyType is not"},
		{name: "bad duration", body: resp(`"cacheKeyType":"Image","cacheDuration":"` + secretInOutput + `"`), wantErr: "cacheDuration is not a duration"},
		{name: "empty duration", body: resp(`"cacheKeyType":"Image","cacheDuration":""`), wantErr: "cacheDuration is not a duration"},
		{name: "duration as a number", body: resp(`"cacheKeyType":"Image","cacheDuration":60`), wantErr: "field cacheDuration has the wrong JSON type"},
		{name: "duration out of range", body: resp(`"cacheKeyType":"Image","cacheDuration":"9999999h"`), wantErr: "cacheDuration is not a duration"},
		{name: "wrong type in auth", body: resp(`"cacheKeyType":"Image","auth":{"` + secretInOutput + `":{"username":7}}`), wantErr: "field auth has the wrong JSON type"},
		{name: "auth a list", body: resp(`"cacheKeyType":"Image","auth":["` + secretInOutput + `"]`), wantErr: "field auth has the wrong JSON type"},

		// What encoding/json allowed and the kubelet refuses.
		{name: "unknown field", body: resp(`"cacheKeyType":"Image","` + secretInOutput + `":true`), wantErr: "unknown, duplicated or miscased field: an unknown field"},
		{name: "miscased field", body: resp(`"CacheKeyType":"Image"`), wantErr: "cacheKeyType miscased"},
		{name: "miscased apiVersion", body: `{"APIVERSION":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Image"}`, wantErr: "apiVersion miscased"},
		{name: "duplicated field", body: resp(`"cacheKeyType":"Image","cacheKeyType":"Global"`), wantErr: "duplicated cacheKeyType"},
		{name: "duplicated apiVersion", body: `{"apiVersion":"x/` + secretInOutput + `","apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Image"}`, wantErr: "duplicated apiVersion"},
		{name: "duplicated auth key", body: resp(`"cacheKeyType":"Image","auth":{"` + secretInOutput + `":{},"` + secretInOutput + `":{}}`), wantErr: "one duplicated in auth"},
		{name: "unknown field in an auth entry", body: resp(`"cacheKeyType":"Image","auth":{"a.example":{"username":"u","` + secretInOutput + `":"x"}}`), wantErr: "an unknown or miscased one in auth"},
		{name: "miscased password", body: resp(`"cacheKeyType":"Image","auth":{"a.example":{"Password":"` + secretInOutput + `"}}`), wantErr: "an unknown or miscased one in auth"},
		{name: "the old auth field", body: resp(`"cacheKeyType":"Image","auth":{"a.example":{"auth":"dTpw"}}`), wantErr: "an unknown or miscased one in auth"},
		{name: "several", body: resp(`"cacheKeyType":"Image","cacheKeyType":"Image","Auth":{},"x1":1,"x2":2`), wantErr: "duplicated cacheKeyType, auth miscased, an unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			apiVersion := tt.apiVersion
			if apiVersion == "" {
				apiVersion = v1
			}
			r, err := cp.DecodeResponse(apiVersion, []byte(tt.body))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.NotContains(t, err.Error(), secretInOutput)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantKeyType, string(r.CacheKeyType))
			assert.Equal(t, tt.wantDuration, r.CacheDuration)
			if len(tt.wantAuth) == 0 {
				assert.Empty(t, r.Auth)
			} else {
				assert.Equal(t, tt.wantAuth, r.Auth)
			}
		})
	}
}

// marker is what the fuzz targets plant in their input: no error may
// quote it.
const marker = "ZQXJmarkerZQXJ"

// planted returns body and, when it has them, body with marker at the
// start of its first JSON string and of its first object key.
func planted(body string) []string {
	inputs := []string{body}
	if i := strings.IndexByte(body, '"'); i >= 0 {
		inputs = append(inputs, body[:i+1]+marker+body[i+1:])
	}
	if i := strings.Index(body, `{"`); i >= 0 {
		inputs = append(inputs, body[:i+2]+marker+body[i+2:])
	}
	return inputs
}

// FuzzDecodeResponse checks that decoding never panics, that an accepted
// response satisfies every documented check, and that no error quotes the
// input: a marker is planted in the input's first JSON string and in its
// first object key. (test/kubelet's FuzzKubeletPluginResponse compares
// the verdicts with the kubelet's.)
func FuzzDecodeResponse(f *testing.F) {
	f.Add(resp(`"cacheKeyType":"Image","cacheDuration":"1m","auth":{"reg.example/app":{"username":"u","password":"p"}}`))
	f.Add(resp(`"cacheKeyType":"Global"`))
	f.Add(resp(`"cacheKeyType":"Registry","auth":{"*.example:5000":{}}`))
	f.Add(resp(`"cacheKeyType":"Registry","cacheKeyType":"Image","Auth":{"a":{"Username":"x","x":1}}`))
	f.Add(resp(`"cacheKeyType":"Image","cacheDuration":"x"`))
	f.Add(`{"apiVersion":`)
	f.Add(`[]`)
	f.Add(`{"auth":{"x":{"username":1}}}`)
	f.Fuzz(func(t *testing.T, body string) {
		if strings.Contains(body, marker) {
			t.Skip()
		}
		for _, in := range planted(body) {
			r, err := cp.DecodeResponse(v1, []byte(in))
			if err != nil {
				assert.NotContains(t, err.Error(), marker)
				continue
			}
			assert.Contains(t, []string{"Image", "Registry", "Global"}, string(r.CacheKeyType))
		}
	})
}

// FuzzDecodeRequest: decoding a request never panics, no error quotes it
// (a marker is planted in its first JSON string and first key), and an
// accepted request has an image and a credentialprovider apiVersion.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(`{"kind":"CredentialProviderRequest","apiVersion":"` + v1 + `","image":"a.example/b","serviceAccountToken":"t","serviceAccountAnnotations":{"k":"v"}}`)
	f.Add(`{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1alpha1","image":"a.example/b"}`)
	f.Add(`{"kind":"CredentialProviderRequest","apiVersion":"` + v1 + `","image":"a","Image":"b","serviceAccountToken":7}`)
	f.Fuzz(func(t *testing.T, body string) {
		if strings.Contains(body, marker) {
			t.Skip()
		}
		for _, in := range planted(body) {
			r, err := cp.DecodeRequest([]byte(in))
			if err != nil {
				assert.NotContains(t, err.Error(), marker)
				continue
			}
			assert.NotEmpty(t, r.Image)
			assert.True(t, strings.HasPrefix(r.APIVersion, "credentialprovider.kubelet.k8s.io/"), r.APIVersion)
		}
	})
}
