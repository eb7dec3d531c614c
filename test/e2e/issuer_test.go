package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// issuer is the token service of the registry's token auth: it checks a
// user's password and grants, per repository, the actions that user may
// take. The Debian registry's htpasswd auth lets every valid user read
// every repository; per-tenant access needs tokens.
//
// It also fronts the registry: /token is its own, every other path is
// passed to docker-registry unchanged (which logs it). Serving the token
// realm on the registry's own host:port is common, and clients such as
// go-containerregistry refuse a realm on another loopback address.
type issuer struct {
	key     *ecdsa.PrivateKey
	certDER []byte
	certPEM []byte
	name    string // the token's iss, which the registry trusts
	service string // the token's aud, the registry's service name

	mu     sync.Mutex
	users  map[string]string              // user -> password
	grants map[string]map[string][]string // user ("" = anyone) -> repository (or prefix "x/*") -> actions
	issued []string                       // "user repo:actions" per grant, for the log

	srv   *http.Server
	addr  string
	proxy *httputil.ReverseProxy // to docker-registry, set by front
}

// front makes the issuer pass every non-token request to backend.
func (is *issuer) front(backend string) {
	is.proxy = httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: backend})
}

func newIssuer() (*issuer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pullguard-e2e-token-issuer"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	is := &issuer{
		key: key, certDER: der, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		name: "pullguard-e2e-issuer", service: "pullguard-e2e",
		users: map[string]string{}, grants: map[string]map[string][]string{},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	is.addr = ln.Addr().String()
	is.srv = &http.Server{Handler: is, ReadHeaderTimeout: 10 * time.Second}
	go is.srv.Serve(ln)
	return is, nil
}

func (is *issuer) realm() string { return "http://" + is.addr + "/token" }

func (is *issuer) close() { _ = is.srv.Close() }

// setUser adds a user or changes its password (a rotation at the registry).
func (is *issuer) setUser(user, password string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.users[user] = password
}

// grant lets user ("" for anyone, even anonymous) take actions on repo
// (a name, or a prefix ending in "/*").
func (is *issuer) grant(user, repo string, actions ...string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.grants[user] == nil {
		is.grants[user] = map[string][]string{}
	}
	is.grants[user][repo] = actions
}

func (is *issuer) allowed(user, repo, action string) bool {
	for _, who := range []string{user, ""} {
		for pattern, actions := range is.grants[who] {
			match := pattern == repo || pattern == "*" || (strings.HasSuffix(pattern, "/*") && strings.HasPrefix(repo, strings.TrimSuffix(pattern, "*")))
			if !match {
				continue
			}
			for _, a := range actions {
				if a == action || a == "*" {
					return true
				}
			}
		}
	}
	return false
}

type access struct {
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

func (is *issuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/token" {
		if is.proxy == nil {
			http.Error(w, "registry not started", http.StatusServiceUnavailable)
			return
		}
		is.proxy.ServeHTTP(w, r)
		return
	}
	var user, password string
	var hasCreds bool
	scopes := r.URL.Query()["scope"]
	switch r.Method {
	case http.MethodGet:
		user, password, hasCreds = r.BasicAuth()
	case http.MethodPost: // OAuth2 password grant, which containerd tries first
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		if r.PostForm.Get("grant_type") != "password" {
			http.Error(w, "unsupported grant_type", http.StatusBadRequest)
			return
		}
		user, password, hasCreds = r.PostForm.Get("username"), r.PostForm.Get("password"), true
		scopes = strings.Fields(r.PostForm.Get("scope"))
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if hasCreds {
		if want, ok := is.users[user]; !ok || want != password {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"invalid credentials"}]}`, http.StatusUnauthorized)
			return
		}
	}
	var granted []access
	for _, scope := range scopes {
		parts := strings.Split(scope, ":")
		if len(parts) != 3 || parts[0] != "repository" {
			continue
		}
		a := access{Type: "repository", Name: parts[1], Actions: []string{}}
		for _, action := range strings.Split(parts[2], ",") {
			if is.allowed(user, parts[1], action) {
				a.Actions = append(a.Actions, action)
			}
		}
		is.issued = append(is.issued, user+" "+parts[1]+":"+strings.Join(a.Actions, ","))
		granted = append(granted, a)
	}
	token, err := is.sign(user, granted)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"token": token, "access_token": token, "expires_in": 300, "issued_at": time.Now().UTC().Format(time.RFC3339)})
}

// sign makes an ES256 JWT the distribution registry accepts: the signing
// certificate travels in the x5c header and chains to the registry's
// rootcertbundle.
func (is *issuer) sign(user string, granted []access) (string, error) {
	now := time.Now()
	jti := make([]byte, 8)
	_, _ = rand.Read(jti)
	header, _ := json.Marshal(map[string]any{"typ": "JWT", "alg": "ES256", "x5c": []string{base64.StdEncoding.EncodeToString(is.certDER)}})
	claims, _ := json.Marshal(map[string]any{
		"iss": is.name, "sub": user, "aud": is.service,
		"exp": now.Add(5 * time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(), "iat": now.Unix(),
		"jti": base64.RawURLEncoding.EncodeToString(jti), "access": granted,
	})
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	digest := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, is.key, digest[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + enc.EncodeToString(sig), nil
}
