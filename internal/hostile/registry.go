// Package hostile holds a lying container registry for tests: it claims, in
// Docker-Content-Digest headers, the digest of a manifest it does not have
// (another tenant's private manifest, whose digest is no secret) and never
// serves that manifest's bytes. It listens on 127.0.0.1 only and logs every
// request it answers, so a test can show what a runtime asked.
//
// Only tests import it (pkg/criruntime, imagemanager, pkg/criproxy,
// test/e2e); it depends on the standard library only.
package hostile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
)

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

	srv       *httptest.Server
	claimed   string
	mediaType string
	mode      Mode
	crafted   []byte // served as the manifest, when set

	mu  sync.Mutex
	log []Request
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
	r := &Registry{claimed: claimed, mediaType: mediaType, mode: mode}
	r.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(r.serve)}}
	r.srv.Start()
	r.Host = l.Addr().String()
	return r, nil
}

// Close stops the registry.
func (r *Registry) Close() { r.srv.Close() }

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
		r.mu.Lock()
		r.log = append(r.log, Request{Method: req.Method, Path: req.URL.Path, Status: status, Authorized: req.Header.Get("Authorization") != ""})
		r.mu.Unlock()
	}()
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	switch {
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
