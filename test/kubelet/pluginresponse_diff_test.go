package kubelet

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
	"k8s.io/kubelet/pkg/apis/credentialprovider/install"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletconfigv1 "k8s.io/kubernetes/pkg/kubelet/apis/config/v1"
	kubeletconfigv1alpha1 "k8s.io/kubernetes/pkg/kubelet/apis/config/v1alpha1"
	kubeletconfigv1beta1 "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"

	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/credential"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// A plugin's answer read by pullguard (credentialprovider.DecodeResponse)
// against the kubelet's own code path, in process: no root, no cluster, no
// machine lock.
//
// The kubelet's verdict and what it does with an answer come from running
// it (pluginexec_test.go): a registered provider whose plugin prints the
// answer, looked up for an image of the case's own host (are credentials
// given, was a failure logged), again (was the answer cached), for another
// repository of the host (cached per image?) and for another host (cached
// for every image?). pullguard's Response must predict each: accepted,
// the same credentials for the image (through pkg/keyring), cached when
// its duration (or the provider's default) is positive, under its
// cacheKeyType.
//
// The exact values the kubelet decodes (every auth entry, the duration to
// the nanosecond) do not show through a look-up; kubeletDecodeResponse
// repeats the kubelet's two steps with the same calls (ExecPlugin's
// DefaultMetaFactory.Interpret and apiVersion check, decodeResponse's
// strict UniversalDecoder of the kubelet's scheme with its kind and group
// checks, provide's cacheKeyType check), and each case checks that this
// agrees with the look-ups and that pullguard's Response equals it.

var (
	kubeletScheme = runtime.NewScheme()
	kubeletCodecs = serializer.NewCodecFactory(kubeletScheme, serializer.EnableStrict)
)

// The scheme of k8s.io/kubernetes pkg/credentialprovider/plugin, built as
// its init builds it.
func init() {
	install.Install(kubeletScheme)
	utilruntime.Must(kubeletconfig.AddToScheme(kubeletScheme))
	utilruntime.Must(kubeletconfigv1alpha1.AddToScheme(kubeletScheme))
	utilruntime.Must(kubeletconfigv1beta1.AddToScheme(kubeletScheme))
	utilruntime.Must(kubeletconfigv1.AddToScheme(kubeletScheme))
}

// kubeletDecodeResponse is what the kubelet makes of a plugin's stdout:
// the decoded response, or why it does not use it.
func kubeletDecodeResponse(apiVersion string, data []byte) (*credentialproviderapi.CredentialProviderResponse, error) {
	gvk, err := jsonserializer.DefaultMetaFactory.Interpret(data)
	if err != nil {
		return nil, err
	}
	if gvk.GroupVersion().String() != apiVersion {
		return nil, fmt.Errorf("apiVersion %s", gvk.GroupVersion())
	}
	obj, gvk, err := kubeletCodecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	if gvk.Kind != "CredentialProviderResponse" || gvk.Group != credentialproviderapi.GroupName {
		return nil, fmt.Errorf("kind %s", gvk)
	}
	r, ok := obj.(*credentialproviderapi.CredentialProviderResponse)
	if !ok {
		return nil, fmt.Errorf("type %T", obj)
	}
	switch r.CacheKeyType {
	case credentialproviderapi.ImagePluginCacheKeyType, credentialproviderapi.RegistryPluginCacheKeyType, credentialproviderapi.GlobalPluginCacheKeyType:
		return r, nil
	}
	return nil, fmt.Errorf("cacheKeyType %s", r.CacheKeyType)
}

var responseAPIVersions = []string{
	"credentialprovider.kubelet.k8s.io/v1",
	"credentialprovider.kubelet.k8s.io/v1beta1",
	"credentialprovider.kubelet.k8s.io/v1alpha1",
}

// providerPool holds a provider per apiVersion and default cache
// duration (0 or an hour), replaced when retired.
type providerPool struct {
	k         *kubeletPlugins
	providers map[string]*execProvider
	retired   int
}

func newProviderPool(k *kubeletPlugins) *providerPool {
	return &providerPool{k: k, providers: map[string]*execProvider{}}
}

func (pp *providerPool) get(t testing.TB, apiVersion string, defaultCache time.Duration) *execProvider {
	key := apiVersion + " " + defaultCache.String()
	if p := pp.providers[key]; p != nil {
		return p
	}
	p := pp.k.register(t, apiVersion, defaultCache, false)
	pp.providers[key] = p
	return p
}

func (pp *providerPool) retire(p *execProvider) {
	delete(pp.providers, p.apiVersion+" "+p.defaultCache.String())
	pp.retired++
}

// responseCase is one answer for one provider.
type responseCase struct {
	apiVersion   string
	defaultCache time.Duration
	body         []byte
	secrets      []string // passwords in body, kept out of messages
}

// hosts are the case's image hosts under the provider's domain: the
// image's, and another.
func caseHosts(p *execProvider, n int64) (string, string) {
	return fmt.Sprintf("c%d.%s.test", n, p.name), fmt.Sprintf("d%d.%s.test", n, p.name)
}

var caseCount int64

// compareResponse runs c through the kubelet and pullguard and reports
// every difference; it returns whether the kubelet accepted the answer.
func compareResponse(t *testing.T, h *credential.Hasher, pool *providerPool, c responseCase, what string) (accepted, withCreds bool) {
	t.Helper()
	p := pool.get(t, c.apiVersion, c.defaultCache)
	caseCount++
	host, other := caseHosts(p, caseCount)
	image := host + "/team/app"
	body := leak.Redact(string(c.body), c.secrets...)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s (provider %s, default cache %v): %s\n  answer: %q", what, c.apiVersion, c.defaultCache, fmt.Sprintf(format, args...), body)
	}

	first := pool.k.lookup(t, p, c.body, image, "")
	if !first.ran {
		fail("the kubelet did not run the plugin")
		return false, false
	}
	checkKubeletRequest(t, first.request, p.apiVersion, image, "", what)

	want, kerr := kubeletDecodeResponse(c.apiVersion, c.body)
	if (kerr == nil) == first.refused {
		fail("the kubelet's decoding, repeated here, says accepted=%v (%v); its look-up refused=%v", kerr == nil, kerr, first.refused)
	}
	got, perr := cp.DecodeResponse(c.apiVersion, c.body)
	if (perr == nil) == first.refused {
		fail("the kubelet refused=%v, pullguard's error: %v", first.refused, perr)
		return !first.refused, false
	}
	if perr != nil {
		if findings := leak.Scan(map[string]string{"error": perr.Error()}, c.secrets...); len(findings) > 0 {
			fail("pullguard's error holds a password: %v", findings)
		}
		if len(first.creds) > 0 {
			fail("the kubelet gave credentials for an answer it refused")
		}
		return false, false
	}

	// The decoded answer, exactly.
	if want != nil {
		if got.CacheKeyType != want.CacheKeyType {
			fail("cacheKeyType: kubelet %q, pullguard %q", want.CacheKeyType, got.CacheKeyType)
		}
		switch {
		case (want.CacheDuration == nil) != (got.CacheDuration == nil):
			fail("cacheDuration set: kubelet %v, pullguard %v", want.CacheDuration != nil, got.CacheDuration != nil)
		case want.CacheDuration != nil && want.CacheDuration.Duration != *got.CacheDuration:
			fail("cacheDuration: kubelet %v, pullguard %v", want.CacheDuration.Duration, *got.CacheDuration)
		}
		if !authEqual(want.Auth, got.Auth) {
			fail("auth differs: kubelet keys %q, pullguard keys %q", authKeys(want.Auth), authKeys(got.Auth))
		}
	}

	// The credentials for the image, through pkg/keyring.
	if creds := pullguardCreds(t, h, got, image); !slices.Equal(creds, first.creds) {
		fail("credentials for %s: kubelet %d %v, pullguard %d %v", image, len(first.creds), users(first.creds), len(creds), users(creds))
	}

	// Caching, unless the duration is too short to tell on the real clock.
	ttl := c.defaultCache
	if got.CacheDuration != nil {
		ttl = *got.CacheDuration
	}
	if ttl > 0 && ttl < time.Minute {
		if got.CacheKeyType == credentialproviderapi.GlobalPluginCacheKeyType {
			pool.retire(p) // its cache may answer the next case
		}
		return true, len(first.creds) > 0
	}
	cached := ttl > 0
	for _, l := range []struct {
		image   string
		wantRun bool
	}{
		{image: image, wantRun: !cached},
		{image: host + "/other/app", wantRun: !cached || got.CacheKeyType == credentialproviderapi.ImagePluginCacheKeyType},
		{image: other + "/team/app", wantRun: !cached || got.CacheKeyType != credentialproviderapi.GlobalPluginCacheKeyType},
	} {
		again := pool.k.lookup(t, p, c.body, l.image, "")
		if again.ran != l.wantRun {
			fail("look-up of %s after %s (pullguard: cacheKeyType %s, cached %v): the kubelet ran the plugin: %v", l.image, image, got.CacheKeyType, cached, again.ran)
		}
		if again.refused {
			fail("look-up of %s: the kubelet refused the answer it took before", l.image)
		}
		if !again.ran && l.image == other+"/team/app" {
			pool.retire(p) // it answers every image from its cache now
		}
	}
	return true, len(first.creds) > 0
}

// checkKubeletRequest: pullguard's wrapper reads the request the kubelet
// wrote as the kubelet meant it.
func checkKubeletRequest(t *testing.T, data []byte, apiVersion, image, token, what string) {
	t.Helper()
	req, err := cp.DecodeRequest(data)
	if !assert.NoError(t, err, "%s: the kubelet's request %q", what, leak.Redact(string(data), token)) {
		return
	}
	assert.Equal(t, cp.Request{APIVersion: apiVersion, Image: image, ServiceAccountToken: token}.Image, req.Image, what)
	assert.Equal(t, apiVersion, req.APIVersion, what)
	assert.True(t, req.ServiceAccountToken == token, "%s: the request's service account token differs from the one the kubelet sent", what)
}

func pullguardCreds(t *testing.T, h *credential.Hasher, r *cp.Response, image string) []string {
	t.Helper()
	auths := make(map[string]credential.AuthConfig, len(r.Auth))
	for k, a := range r.Auth {
		auths[k] = credential.AuthConfig{Username: a.Username, Password: a.Password}
	}
	s, _ := keyring.NewStatic(h, credential.Source{Kind: credential.SourceNode, Name: "plugin"}, auths)
	im, err := keyring.ParseImage(image)
	require.NoError(t, err)
	var out []string
	for _, c := range keyring.LookupAll(im, s) {
		out = append(out, c.Auth.Username+"\x00"+c.Auth.Password)
	}
	sort.Strings(out)
	return out
}

func authEqual(a, b map[string]credentialproviderapi.AuthConfig) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func authKeys(m map[string]credentialproviderapi.AuthConfig) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// users keeps the user names of "user\x00password" credentials.
func users(creds []string) []string {
	var out []string
	for _, c := range creds {
		u, _, _ := strings.Cut(c, "\x00")
		out = append(out, u)
	}
	return out
}

// TestKubeletPluginResponseDifferential compares pullguard's reading of
// plugin answers with the kubelet's on generated answers (a fixed seed,
// so a failure repeats) and on the cases written out below.
func TestKubeletPluginResponseDifferential(t *testing.T) {
	h, err := credential.NewHasher(bytes.Repeat([]byte{5}, credential.KeySize))
	require.NoError(t, err)
	k := newKubeletPlugins(t)
	pool := newProviderPool(k)

	t.Run("generated", func(t *testing.T) {
		r := rand.New(rand.NewPCG(2133, 2535))
		const cases = 1500
		accepted, withCreds := 0, 0
		for n := range cases {
			c := randomResponse(r, n)
			a, w := compareResponse(t, h, pool, c, fmt.Sprintf("case %d", n))
			if a {
				accepted++
			}
			if w {
				withCreds++
			}
			if t.Failed() {
				break
			}
		}
		t.Logf("%d answers, %d accepted, %d of them with credentials for the image, %d providers retired", cases, accepted, withCreds, pool.retired)
		assert.Greater(t, accepted, cases/5, "the generator must make valid answers often")
		assert.Less(t, accepted, cases*3/4, "the generator must make invalid answers often")
		assert.Greater(t, withCreds, accepted/3, "the generator must make keys match often")
	})

	for _, tt := range namedResponses() {
		t.Run(tt.name, func(t *testing.T) {
			accepted, _ := compareResponse(t, h, pool, tt.c, tt.name)
			assert.Equal(t, tt.accepted, accepted, "the kubelet's verdict, as written down")
		})
	}

	t.Run("service account requests", func(t *testing.T) {
		p := k.register(t, responseAPIVersions[0], 0, true)
		for n, sa := range []struct {
			annotations map[string]string
			token       string
		}{
			{annotations: map[string]string{"example.com/required": "r"}, token: "tok-1"},
			{annotations: map[string]string{"example.com/required": "", "example.com/optional": "o\"\\\u2028\x7f", "other": "x"}, token: "tok.with.dots-2"},
			{annotations: map[string]string{"example.com/required": "\xff\xfe not UTF-8"}, token: "tok-3"},
		} {
			k.setServiceAccount(sa.annotations, sa.token)
			host, _ := caseHosts(p, int64(1000+n))
			image := host + "/team/app"
			body := []byte(`{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"0s","auth":{"` + host + `":{"username":"u","password":"p"}}}`)
			l := k.lookup(t, p, body, image, "builder")
			require.True(t, l.ran, "the kubelet ran the plugin")
			require.False(t, l.refused)
			assert.Len(t, l.creds, 1)
			checkKubeletRequest(t, l.request, p.apiVersion, image, sa.token, fmt.Sprintf("service account %d", n))
		}
	})
}

// namedResponse is a case written out, with the kubelet's verdict.
type namedResponse struct {
	name     string
	c        responseCase
	accepted bool
}

func namedResponses() []namedResponse {
	const v1 = "credentialprovider.kubelet.k8s.io/v1"
	head := `"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse"`
	resp := func(rest string) []byte { return []byte("{" + head + rest + "}") }
	auth := `,"auth":{"*.*.test":{"username":"u","password":"secret-pw"}}`
	c := func(body []byte) responseCase {
		return responseCase{apiVersion: v1, defaultCache: time.Hour, body: body, secrets: []string{"secret-pw"}}
	}
	return []namedResponse{
		{name: "plain", c: c(resp(`,"cacheKeyType":"Image"` + auth)), accepted: true},
		{name: "negative duration, not cached", c: c(resp(`,"cacheKeyType":"Global","cacheDuration":"-1h"` + auth)), accepted: true},
		{name: "zero duration, not cached", c: c(resp(`,"cacheKeyType":"Global","cacheDuration":"0"` + auth)), accepted: true},
		{name: "registry key cached an hour", c: c(resp(`,"cacheKeyType":"Registry","cacheDuration":"1h"` + auth)), accepted: true},
		{name: "global key cached by default", c: c(resp(`,"cacheKeyType":"Global"` + auth)), accepted: true},
		{name: "null auth entry", c: c(resp(`,"cacheKeyType":"Image","auth":{"*.*.test":null}`)), accepted: true},
		{name: "unknown field", c: c(resp(`,"cacheKeyType":"Image","future":{"a":[1,2,{"b":null}]}` + auth))},
		{name: "miscased field", c: c(resp(`,"CacheKeyType":"Image"` + auth))},
		{name: "miscased apiVersion", c: c([]byte(`{"APIVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Image"` + auth + `}`))},
		{name: "duplicated field", c: c(resp(`,"cacheKeyType":"Global","cacheKeyType":"Image"` + auth))},
		{name: "duplicated auth key", c: c(resp(`,"cacheKeyType":"Image","auth":{"a.test":{},"a.test":{}}`))},
		{name: "auth key duplicated by an escape", c: c(resp(`,"cacheKeyType":"Image","auth":{"a.test":{},"\u0061.test":{}}`))},
		{name: "miscased username", c: c(resp(`,"cacheKeyType":"Image","auth":{"*.*.test":{"Username":"u","password":"secret-pw"}}`))},
		{name: "docker config auth field", c: c(resp(`,"cacheKeyType":"Image","auth":{"*.*.test":{"auth":"dTpzZWNyZXQtcHc="}}`))},
		{name: "cacheKeyType in lower case", c: c(resp(`,"cacheKeyType":"image"` + auth))},
		{name: "duration as a number", c: c(resp(`,"cacheKeyType":"Image","cacheDuration":3600` + auth))},
		{name: "duration out of range", c: c(resp(`,"cacheKeyType":"Image","cacheDuration":"2562048h"` + auth))},
		{name: "longest duration", c: c(resp(`,"cacheKeyType":"Image","cacheDuration":"2562047h"` + auth)), accepted: true},
		{name: "huge number in an unknown field", c: c(resp(`,"cacheKeyType":"Image","n":1e99999` + auth))},
		{name: "request kind", c: c([]byte(`{"apiVersion":"` + v1 + `","kind":"CredentialProviderRequest","image":"x"}`))},
		{name: "other version", c: c([]byte(`{"apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}`))},
		{name: "a second document", c: c(append(resp(`,"cacheKeyType":"Image"`), resp(`,"cacheKeyType":"Image"`)...))},
		{name: "YAML", c: c([]byte("apiVersion: " + v1 + "\nkind: CredentialProviderResponse\ncacheKeyType: Image\n"))},
		{name: "byte order mark", c: c(append([]byte("\ufeff"), resp(`,"cacheKeyType":"Image"`)...))},
		{name: "invalid UTF-8 in a password", c: c(resp(`,"cacheKeyType":"Image","auth":{"*.*.test":{"username":"u","password":"secret-pw` + "\xff" + `"}}`)), accepted: true},
	}
}

// FuzzKubeletPluginResponse compares pullguard's reading of a fuzzed
// answer with the kubelet's, end to end as
// TestKubeletPluginResponseDifferential does. provider's low two bits
// choose the apiVersion, the next one the default cache duration (none or
// an hour).
func FuzzKubeletPluginResponse(f *testing.F) {
	selector := func(c responseCase) uint8 {
		sel := uint8(slices.Index(responseAPIVersions, c.apiVersion))
		if c.defaultCache > 0 {
			sel |= 4
		}
		return sel
	}
	for _, tt := range namedResponses() {
		f.Add(tt.c.body, selector(tt.c))
	}
	r := rand.New(rand.NewPCG(4412, 33))
	for n := range 40 {
		c := randomResponse(r, n)
		f.Add(c.body, selector(c))
	}
	h, err := credential.NewHasher(bytes.Repeat([]byte{5}, credential.KeySize))
	require.NoError(f, err)
	pool := newProviderPool(newKubeletPlugins(f))
	f.Fuzz(func(t *testing.T, body []byte, provider uint8) {
		c := responseCase{
			apiVersion:   responseAPIVersions[int(provider&3)%len(responseAPIVersions)],
			defaultCache: []time.Duration{0, time.Hour}[(provider>>2)&1],
			body:         body,
		}
		compareResponse(t, h, pool, c, "fuzz")
	})
}
