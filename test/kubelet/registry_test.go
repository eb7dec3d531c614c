package kubelet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// registry is the Debian docker-registry behind token auth. A token
// service in this process checks passwords and grants pull per user and
// repository prefix; it also fronts the registry on one address, so that
// the token realm and the registry share host:port, as clients expect.
type registry struct {
	addr    string // what clients use: the front
	backend string // docker-registry itself
	key     *ecdsa.PrivateKey
	cert    []byte // DER
	srv     *http.Server
	proxy   *httputil.ReverseProxy
	out     *output
	proc    *child
	syncN   int

	mu    sync.Mutex
	users map[string]string // user -> password
	// minted is a file of "user:password" lines, one per token a
	// token-per-call plugin minted (the test plugin's -mode mint): each
	// is a valid password of its user, as ECR's tokens are.
	minted string
	grants map[string][]string // user ("" = anyone) -> repository prefixes it may pull
	// badLogins counts, per user name, the token requests refused for a
	// wrong password.
	badLogins map[string]int
	holds     map[string]*hold // request path -> the hold on it
	// stalls are the requests held by client and path prefix.
	stalls []*stall
}

// stall holds every request of one client (its User-Agent's product) for
// paths under a prefix, until released or the client gives up.
type stall struct {
	agent, prefix string
	released      chan struct{}
	releaseOnce   sync.Once
	held          atomic.Int32 // requests waiting now
}

// hold keeps the requests for one path waiting until it is released.
type hold struct {
	arrived     chan struct{} // closed at the first request held
	arrivedOnce sync.Once
	released    chan struct{}
	releaseOnce sync.Once
}

const (
	tokenIssuer  = "pullguard-kubelet-e2e"
	tokenService = "pullguard-kubelet-e2e-registry"
)

func startRegistry(ctx context.Context, dir string) (*registry, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: tokenIssuer},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("token signing certificate: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		ln.Close()
		return nil, err
	}
	r := &registry{
		addr: ln.Addr().String(), backend: "127.0.0.1:" + strconv.Itoa(port), key: key, cert: der,
		users: map[string]string{}, grants: map[string][]string{},
		badLogins: map[string]int{}, holds: map[string]*hold{},
	}
	r.proxy = httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: r.backend})
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)

	bundle := filepath.Join(dir, "issuer.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		r.close()
		return nil, err
	}
	config := filepath.Join(dir, "registry.yml")
	cfg := fmt.Sprintf(`version: 0.1
log: {level: info, formatter: text, accesslog: {disabled: false}}
storage: {filesystem: {rootdirectory: %q}}
http: {addr: %q}
auth:
  token: {realm: %q, service: %q, issuer: %q, rootcertbundle: %q}
`, filepath.Join(dir, "storage"), r.backend, "http://"+r.addr+"/token", tokenService, tokenIssuer, bundle)
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		r.close()
		return nil, err
	}
	if r.out, err = newOutput(filepath.Join(dir, "registry.log")); err != nil {
		r.close()
		return nil, err
	}
	if r.proc, err = spawn(r.out, nil, "/usr/bin/docker-registry", "serve", config); err != nil {
		r.close()
		return nil, err
	}
	err = poll(30*time.Second, 50*time.Millisecond, func() (bool, error) {
		resp, err := http.Get("http://" + r.backend + "/v2/")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return true, nil
	})
	if err != nil {
		r.close()
		return nil, fmt.Errorf("docker-registry did not start: %w\n%s", err, r.out.tail(20))
	}
	return r, nil
}

func (r *registry) close() {
	if r.proc != nil {
		r.proc.stop(10 * time.Second)
	}
	_ = r.srv.Close()
}

func (r *registry) setUser(user, password string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.users[user] = password
}

func (r *registry) password(user string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.users[user]
}

// acceptMinted makes every "user:password" line of file (read at each
// token request) a valid password of its user.
func (r *registry) acceptMinted(file string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.minted = file
}

// validPassword reports whether password is user's, or one minted for it.
func (r *registry) validPassword(user, password string) bool {
	if want, ok := r.users[user]; ok && want == password {
		return true
	}
	if r.minted == "" {
		return false
	}
	data, err := os.ReadFile(r.minted)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if u, p, ok := strings.Cut(line, ":"); ok && u == user && p == password {
			return true
		}
	}
	return false
}

// grant lets user ("" for anyone) pull every repository under prefix.
func (r *registry) grant(user, prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.grants[user] = append(r.grants[user], prefix)
}

func (r *registry) mayPull(user, repo string) bool {
	for _, who := range []string{user, ""} {
		for _, p := range r.grants[who] {
			if p == "*" || strings.HasPrefix(repo, p) {
				return true
			}
		}
	}
	return false
}

type grantedAccess struct {
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

// hold makes every request for path (e.g. "/v2/shared/tool/manifests/v2")
// wait, before it reaches docker-registry, until release is called (or
// the client gives up). arrived is closed when the first one is held.
// release may be called more than once.
func (r *registry) hold(path string) (arrived <-chan struct{}, release func()) {
	h := &hold{arrived: make(chan struct{}), released: make(chan struct{})}
	r.mu.Lock()
	r.holds[path] = h
	r.mu.Unlock()
	return h.arrived, func() {
		r.mu.Lock()
		if r.holds[path] == h {
			delete(r.holds, path)
		}
		r.mu.Unlock()
		h.releaseOnce.Do(func() { close(h.released) })
	}
}

// refusedLogins is how many token requests were refused for a wrong
// password given for user.
func (r *registry) refusedLogins(user string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.badLogins[user]
}

// stall makes every request of client agent (the product of its
// User-Agent, "pullguard" or "containerd") for a path under prefix wait,
// before it reaches docker-registry, until release is called or the client
// gives up: a tenant's registry that serves the runtime's pull and stalls
// pullguard's own requests, telling them apart as a registry can.
// held says how many requests it holds now.
func (r *registry) stall(agent, prefix string) (held func() int, release func()) {
	s := &stall{agent: agent, prefix: prefix, released: make(chan struct{})}
	r.mu.Lock()
	r.stalls = append(r.stalls, s)
	r.mu.Unlock()
	return func() int { return int(s.held.Load()) }, func() {
		r.mu.Lock()
		r.stalls = slices.DeleteFunc(r.stalls, func(x *stall) bool { return x == s })
		r.mu.Unlock()
		s.releaseOnce.Do(func() { close(s.released) })
	}
}

// stalled is the stall req falls under, if any.
func (r *registry) stalled(req *http.Request) *stall {
	product, _, _ := strings.Cut(req.UserAgent(), "/")
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.stalls {
		if s.agent == product && strings.HasPrefix(req.URL.Path, s.prefix) {
			return s
		}
	}
	return nil
}

func (r *registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if s := r.stalled(req); s != nil {
		s.held.Add(1)
		select {
		case <-s.released:
			s.held.Add(-1)
		case <-req.Context().Done():
			s.held.Add(-1)
			return
		}
	}
	if req.URL.Path != "/token" {
		r.mu.Lock()
		h := r.holds[req.URL.Path]
		r.mu.Unlock()
		if h != nil {
			h.arrivedOnce.Do(func() { close(h.arrived) })
			select {
			case <-h.released:
			case <-req.Context().Done():
				return
			}
		}
		r.proxy.ServeHTTP(w, req)
		return
	}
	user, password, withCreds := req.BasicAuth()
	scopes := req.URL.Query()["scope"]
	if req.Method == http.MethodPost { // the OAuth2 password grant containerd tries first
		if err := req.ParseForm(); err != nil || req.PostForm.Get("grant_type") != "password" {
			http.Error(w, "unsupported token request", http.StatusBadRequest)
			return
		}
		user, password, withCreds = req.PostForm.Get("username"), req.PostForm.Get("password"), true
		scopes = strings.Fields(req.PostForm.Get("scope"))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if withCreds {
		if !r.validPassword(user, password) {
			r.badLogins[user]++
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}`, http.StatusUnauthorized)
			return
		}
	} else {
		user = ""
	}
	granted := []grantedAccess{}
	for _, s := range scopes {
		parts := strings.Split(s, ":")
		if len(parts) != 3 || parts[0] != "repository" {
			continue
		}
		a := grantedAccess{Type: "repository", Name: parts[1], Actions: []string{}}
		for _, action := range strings.Split(parts[2], ",") {
			if user == adminUser || (action == "pull" && r.mayPull(user, parts[1])) {
				a.Actions = append(a.Actions, action)
			}
		}
		granted = append(granted, a)
	}
	tok, err := r.sign(user, granted)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"token": tok, "access_token": tok, "expires_in": 300})
}

// sign makes an ES256 JWT whose x5c certificate chains to the registry's
// rootcertbundle.
func (r *registry) sign(user string, access []grantedAccess) (string, error) {
	now := time.Now()
	header, err := json.Marshal(map[string]any{"typ": "JWT", "alg": "ES256", "x5c": []string{base64.StdEncoding.EncodeToString(r.cert)}})
	if err != nil {
		return "", err
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	claims, err := json.Marshal(map[string]any{
		"iss": tokenIssuer, "aud": tokenService, "sub": user, "access": access,
		"iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"jti": base64.RawURLEncoding.EncodeToString(nonce),
	})
	if err != nil {
		return "", err
	}
	b64 := base64.RawURLEncoding
	payload := b64.EncodeToString(header) + "." + b64.EncodeToString(claims)
	sum := sha256.Sum256([]byte(payload))
	rs, ss, err := ecdsa.Sign(rand.Reader, r.key, sum[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64)
	rs.FillBytes(sig[:32])
	ss.FillBytes(sig[32:])
	return payload + "." + b64.EncodeToString(sig), nil
}

// hit is one request in docker-registry's access log.
type hit struct {
	method, path string
	status       int
}

var accessLog = regexp.MustCompile(`"(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+) HTTP/[0-9.]+" (\d{3}) `)

// mark returns a position in the access log after every request made so
// far: it sends a request of its own and waits for its line.
func (r *registry) mark(ctx context.Context) (int, error) {
	r.syncN++
	path := fmt.Sprintf("/v2/e2e-sync/%d/tags/list", r.syncN)
	pos := r.out.position()
	resp, err := http.Get("http://" + r.backend + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.out.await(ctx, pos, path); err != nil {
		return 0, fmt.Errorf("registry access log: %w", err)
	}
	return r.out.position(), nil
}

// hits returns the requests logged between two marks, without the marks'.
func (r *registry) hits(from, to int) []hit {
	var out []hit
	lines := r.out.from(from)
	if to-from < len(lines) {
		lines = lines[:to-from]
	}
	for _, l := range lines {
		m := accessLog.FindStringSubmatch(l)
		if m == nil || strings.HasPrefix(m[2], "/v2/e2e-sync/") {
			continue
		}
		status, _ := strconv.Atoi(m[3])
		out = append(out, hit{method: m[1], path: m[2], status: status})
	}
	return out
}

// traffic sums up a repository's requests.
type traffic struct {
	manifestOK, manifestDenied, blobs, total int
	lastManifestStatus                       int
}

func summarize(hits []hit, repo string) traffic {
	var t traffic
	for _, h := range hits {
		t.total++
		switch {
		case strings.HasPrefix(h.path, "/v2/"+repo+"/manifests/"):
			if h.status == http.StatusOK {
				t.manifestOK++
			} else {
				t.manifestDenied++
			}
			t.lastManifestStatus = h.status
		case strings.HasPrefix(h.path, "/v2/"+repo+"/blobs/"):
			t.blobs++
		}
	}
	return t
}
