package criruntime

import (
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// authenticator turns a CRI AuthConfig into go-containerregistry's
// Authenticator: Username/Password or Auth (base64 "user:pass") answer Basic
// challenges and are exchanged for a token on Bearer ones; IdentityToken is
// sent as an OAuth2 refresh token; RegistryToken is sent as a bearer token
// as it is. A nil or empty AuthConfig is an anonymous pull.
func authenticator(auth *runtimeapi.AuthConfig) authn.Authenticator {
	if auth == nil || (auth.Username == "" && auth.Password == "" && auth.Auth == "" &&
		auth.IdentityToken == "" && auth.RegistryToken == "") {
		return authn.Anonymous
	}
	return authn.FromConfig(authn.AuthConfig{
		Username:      auth.Username,
		Password:      auth.Password,
		Auth:          auth.Auth,
		IdentityToken: auth.IdentityToken,
		RegistryToken: auth.RegistryToken,
	})
}

// challengeTransport answers a registry's Basic challenge on a request that
// carried no credentials by sending it again with them, once, to the same
// host only. go-containerregistry decides up front from a ping of /v2/
// whether to authenticate; a registry that leaves /v2/ open but protects
// repositories would otherwise never see the credentials. containerd
// authenticates this way (on the 401 of the request itself).
type challengeTransport struct {
	inner  http.RoundTripper
	host   string
	header string // "Basic ...", or "" when there is nothing to send
}

func newChallengeTransport(inner http.RoundTripper, host string, auth *runtimeapi.AuthConfig) http.RoundTripper {
	header := basicHeader(auth)
	if header == "" {
		return inner
	}
	return &challengeTransport{inner: inner, host: host, header: header}
}

func basicHeader(auth *runtimeapi.AuthConfig) string {
	if auth == nil {
		return ""
	}
	if auth.Username != "" && auth.Password != "" {
		req := &http.Request{Header: http.Header{}}
		req.SetBasicAuth(auth.Username, auth.Password)
		return req.Header.Get("Authorization")
	}
	if auth.Auth != "" {
		return "Basic " + auth.Auth
	}
	return ""
}

func (c *challengeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.inner.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || req.Header.Get("Authorization") != "" ||
		req.URL.Host != c.host || req.URL.Path == "/v2/" ||
		(req.Method != http.MethodGet && req.Method != http.MethodHead) || !basicChallenge(resp) {
		return resp, err
	}
	resp.Body.Close()
	retry := req.Clone(req.Context())
	retry.Header.Set("Authorization", c.header)
	return c.inner.RoundTrip(retry)
}

func basicChallenge(resp *http.Response) bool {
	for _, v := range resp.Header.Values("WWW-Authenticate") {
		if len(v) >= 5 && strings.EqualFold(v[:5], "basic") {
			return true
		}
	}
	return false
}
