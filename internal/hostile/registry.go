// Package hostile holds a lying container registry for tests: it claims, in
// Docker-Content-Digest headers, the digest of a manifest it does not have
// (another tenant's private manifest, whose digest is no secret) and never
// serves that manifest's bytes. It listens on 127.0.0.1 only and logs every
// request it answers, so a test can show what a runtime asked.
//
// In its resource modes (StallAfterHeaders to TLSStall) it attacks the
// client itself instead: it tells pullguard's requests (their User-Agent
// says pullguard) from a runtime's, answers the runtime's as OtherBytes
// does (a HEAD claims the digest: containerd's resolve of a name), and
// makes pullguard's manifest GETs cost time or memory. Close stops it at
// once, also while it holds a request.
//
// Only tests import it (pkg/criruntime, imagemanager, pkg/criproxy,
// test/e2e); it depends on the standard library only.
package hostile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Mode says how the registry answers a GET of the manifest.
type Mode int

const (
	// NoBytes answers a GET of the manifest with 404 (a HEAD still claims
	// the digest).
	NoBytes Mode = iota
	// OtherBytes serves a manifest of its own under the claimed digest's
	// header.
	OtherBytes
	// OtherBytesSchema1 serves a manifest of its own as a signed schema 1
	// manifest (a media type whose digest go-containerregistry takes from
	// the header) under the claimed digest's header.
	OtherBytesSchema1

	// StallAfterHeaders answers a GET of a manifest with its headers,
	// then sends nothing more.
	StallAfterHeaders
	// OneBytePerSecond answers a GET of a manifest with its headers, then
	// with one byte of a manifest a second.
	OneBytePerSecond
	// HugeToken challenges a GET of a manifest for a Bearer token from
	// the registry's own realm, which answers a JSON object without end
	// (no Content-Length: gigabytes, until the client stops reading).
	HugeToken
	// HugeManifest answers a GET of a manifest with a manifest without
	// end (no Content-Length).
	HugeManifest
	// RedirectLoop answers a GET of a manifest with a redirect to itself.
	RedirectLoop
	// ManyChallenges answers a GET of a manifest with a 401 carrying
	// Challenges WWW-Authenticate challenges, each a header of its own.
	ManyChallenges
	// EscapedChallenge answers a GET of a manifest with a 401 whose one
	// Bearer challenge carries as many parameters with an escaped
	// character as fit in EscapedChallengeBytes (containerd's parser
	// copies the rest of the header for each).
	EscapedChallenge
	// TLSStall accepts connections and never sends a byte: a TLS
	// handshake, or a plain HTTP request, that never completes. It
	// answers nothing at all, a HEAD neither.
	TLSStall
)

// Challenges is how many challenges ManyChallenges sends.
const Challenges = 10_000

// EscapedChallengeBytes is the length of EscapedChallenge's challenge:
// just under pullguard's bound on an answer's header (16 KiB), which
// refuses a longer one.
const EscapedChallengeBytes = 15 << 10

// String names the mode, for test names.
func (m Mode) String() string {
	names := []string{"no bytes", "other bytes", "other bytes as schema 1", "stall after the headers", "one byte per second",
		"huge token", "huge manifest", "redirect loop", "10000 challenges", "escaped challenge", "TLS handshake that never completes"}
	if int(m) < len(names) {
		return names[m]
	}
	return fmt.Sprintf("mode %d", int(m))
}

// StartCrafted starts a registry that serves manifest (with media type
// mediaType) for every tag and for its own digest, honestly hashed, but no
// blob: a manifest or index of its own that names another tenant's
// config, layers or manifest by their digests (which are not secret).
func StartCrafted(manifest []byte, mediaType string) (*Registry, error) {
	r, err := Start("", mediaType, OtherBytes)
	if err != nil {
		return nil, err
	}
	r.crafted = manifest
	return r, nil
}

// Request is one request the registry answered.
type Request struct {
	Method string
	Path   string
	Status int
	// Authorized says whether the request carried an Authorization header.
	Authorized bool
}

func (r Request) String() string {
	return fmt.Sprintf("%s %s %d authorized=%t", r.Method, r.Path, r.Status, r.Authorized)
}

// Registry is the lying registry. Close it when done.
type Registry struct {
	// Host is host:port, for image references ("<Host>/evil/app:v1").
	Host string

	srv       *httptest.Server // nil in TLSStall
	claimed   string
	mediaType string
	mode      Mode
	crafted   []byte // served as the manifest, when set

	stop     chan struct{} // closed by Close: every held request ends
	attacked chan struct{} // closed when the first attack begins
	once     sync.Once

	// TLSStall's own listener and the connections it holds.
	lis   net.Listener
	conns sync.WaitGroup

	mu    sync.Mutex
	log   []Request
	held  map[net.Conn]bool
	close sync.Once
}

// Start starts a registry that claims digest claimed (with media type
// mediaType, e.g. "application/vnd.docker.distribution.manifest.v2+json")
// for every manifest of every repository, and answers GETs as mode says.
// /v2/ answers 200 to everyone; blobs are never served.
func Start(claimed, mediaType string, mode Mode) (*Registry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Registry{claimed: claimed, mediaType: mediaType, mode: mode, stop: make(chan struct{}), attacked: make(chan struct{}), held: map[net.Conn]bool{}}
	r.Host = l.Addr().String()
	if mode == TLSStall {
		r.lis = l
		r.conns.Add(1)
		go r.acceptSilently()
		return r, nil
	}
	r.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(r.serve)}}
	r.srv.Start()
	return r, nil
}

// Close stops the registry, ending every request it holds; it returns
// once none is left.
func (r *Registry) Close() {
	r.close.Do(func() {
		close(r.stop)
		if r.srv != nil {
			r.srv.Close()
			return
		}
		r.lis.Close()
		r.mu.Lock()
		for c := range r.held {
			c.Close()
		}
		r.mu.Unlock()
		r.conns.Wait()
	})
}

// Attacked is closed once the registry began its first attack (holds a
// request, streams, redirects or challenges).
func (r *Registry) Attacked() <-chan struct{} { return r.attacked }

func (r *Registry) attack() { r.once.Do(func() { close(r.attacked) }) }

// acceptSilently is TLSStall: every connection is held, read and never
// answered, until the client or Close ends it.
func (r *Registry) acceptSilently() {
	defer r.conns.Done()
	for {
		c, err := r.lis.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		select {
		case <-r.stop:
			r.mu.Unlock()
			c.Close()
			return
		default:
		}
		r.held[c] = true
		r.conns.Add(1)
		r.mu.Unlock()
		r.attack()
		go func() {
			defer r.conns.Done()
			_, _ = io.Copy(io.Discard, c) // until the client or Close closes it
			c.Close()
			r.mu.Lock()
			delete(r.held, c)
			r.mu.Unlock()
			r.record(Request{Method: "CONNECT", Path: c.RemoteAddr().String()})
		}()
	}
}

func (r *Registry) record(req Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, req)
}

// Requests returns every request answered so far, in order.
func (r *Registry) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.log...)
}

// Log returns the requests as text, one a line.
func (r *Registry) Log() string {
	var b strings.Builder
	for _, req := range r.Requests() {
		b.WriteString(req.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// bogus is the manifest the registry serves in the OtherBytes modes: valid
// JSON, and not the claimed manifest.
const bogus = `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",` +
	`"config":{"mediaType":"application/vnd.docker.container.image.v1+json","size":2,` +
	`"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},"layers":[]}`

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	status := http.StatusOK
	defer func() {
		r.record(Request{Method: req.Method, Path: req.URL.Path, Status: status, Authorized: req.Header.Get("Authorization") != ""})
	}()
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	switch {
	case r.attacks(req):
		status = r.attackClient(w, req)
	case req.URL.Path == "/v2/" || req.URL.Path == "/v2":
		w.WriteHeader(status)
	case r.crafted != nil && strings.Contains(req.URL.Path, "/manifests/"):
		sum := sha256.Sum256(r.crafted)
		d := "sha256:" + hex.EncodeToString(sum[:])
		if ref := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]; strings.HasPrefix(ref, "sha256:") && ref != d {
			status = http.StatusNotFound
			w.WriteHeader(status)
			return
		}
		w.Header().Set("Docker-Content-Digest", d)
		w.Header().Set("Content-Type", r.mediaType)
		w.Header().Set("Content-Length", fmt.Sprint(len(r.crafted)))
		w.WriteHeader(status)
		if req.Method == http.MethodGet {
			_, _ = w.Write(r.crafted)
		}
	case strings.Contains(req.URL.Path, "/manifests/") && req.Method == http.MethodHead:
		w.Header().Set("Docker-Content-Digest", r.claimed)
		w.Header().Set("Content-Type", r.mediaType)
		w.Header().Set("Content-Length", "1024")
		w.WriteHeader(status)
	case strings.Contains(req.URL.Path, "/manifests/") && req.Method == http.MethodGet && r.mode != NoBytes:
		w.Header().Set("Docker-Content-Digest", r.claimed)
		mt := r.mediaType
		if r.mode == OtherBytesSchema1 {
			mt = "application/vnd.docker.distribution.manifest.v1+prettyjws"
		}
		w.Header().Set("Content-Type", mt)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(bogus))
	default:
		status = http.StatusNotFound
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`))
	}
}
