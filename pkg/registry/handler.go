package registry

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
)

// caller is who a request says it is.
type caller struct {
	user     string // authenticated user; empty if anonymous or rejected
	claimed  string // the user name the credentials gave
	rejected bool   // credentials were present but not accepted
}

// ServeHTTP implements http.Handler: it answers one request, records it
// and logs it. A Registry can thus also be served by an httptest.Server.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := r.opts.clock.Now()
	rw := &statusWriter{ResponseWriter: w}
	rt := parseRoute(req.URL.Path)
	c := r.authenticate(req)
	r.serve(rw, req, rt, c)
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	rec := Request{
		Time:       start,
		Duration:   r.opts.clock.Since(start),
		Method:     req.Method,
		Path:       req.URL.Path,
		Kind:       rt.kind,
		Repository: rt.repo,
		Reference:  rt.ref,
		Status:     rw.status,
		Bytes:      rw.bytes,
		User:       c.user,
		Claimed:    c.claimed,
	}
	if req.Method == http.MethodHead {
		rec.Bytes = 0
	}
	r.requests.add(rec)
	r.log.log(rec)
}

// authenticate checks the request's Basic credentials, if any.
func (r *Registry) authenticate(req *http.Request) caller {
	if req.Header.Get("Authorization") == "" {
		return caller{}
	}
	user, password, ok := req.BasicAuth()
	if !ok || user == "" {
		// Bearer or malformed: Basic is the only scheme accepted.
		return caller{rejected: true}
	}
	if !r.users.verify(user, password) {
		return caller{claimed: user, rejected: true}
	}
	return caller{user: user, claimed: user}
}

// serve decides and answers one request.
func (r *Registry) serve(w http.ResponseWriter, req *http.Request, rt route, c caller) {
	switch {
	case r.down.Load():
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "registry is down", nil)
		return
	case !rt.api:
		writeError(w, http.StatusNotFound, CodeUnknown, "not a registry API path", nil)
		return
	case c.rejected:
		writeError(w, http.StatusUnauthorized, CodeUnauthorized, "authentication required", nil)
		return
	}
	if rt.repo == "" {
		// Base, catalog and unknown API paths: any authenticated user.
		if c.user == "" {
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "authentication required", nil)
			return
		}
		switch rt.kind {
		case KindBase:
			r.inner.ServeHTTP(w, req)
		case KindCatalog:
			r.serveCatalog(w, req, c.user)
		default:
			writeError(w, http.StatusNotFound, CodeUnknown, "unknown registry API path", nil)
		}
		return
	}
	need := rt.need(req.Method)
	if rt.badName {
		if c.user == "" {
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "authentication required", nil)
			return
		}
		writeError(w, http.StatusBadRequest, CodeNameInvalid, "invalid repository name", nil)
		return
	}
	if !r.allowed(c.user, rt.repo, need) {
		detail := newAccessDetail(rt.repo, need)
		switch {
		case c.user == "":
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "authentication required", detail)
		case r.opts.deniedStatus == http.StatusForbidden:
			writeError(w, http.StatusForbidden, CodeDenied, "requested access to the resource is denied", detail)
		default:
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "access to the requested resource is not authorized", detail)
		}
		return
	}
	r.inner.ServeHTTP(w, req.WithContext(withRepo(req.Context(), rt.repo)))
}

// allowed reports whether user (empty: anonymous) holds need on repo.
func (r *Registry) allowed(user, repo string, need permission) bool {
	if user == "" {
		return need == permRead && r.access.public(repo)
	}
	return r.access.permission(user, repo) >= need
}

// serveCatalog answers /v2/_catalog with only the repositories user may
// read, sorted. The n parameter is applied before the filter.
func (r *Registry) serveCatalog(w http.ResponseWriter, req *http.Request, user string) {
	buf := &bufferWriter{header: http.Header{}}
	r.inner.ServeHTTP(buf, req)
	var cat struct {
		Repositories []string `json:"repositories"`
	}
	if buf.status != http.StatusOK || json.Unmarshal(buf.body.Bytes(), &cat) != nil {
		for k, v := range buf.header {
			w.Header()[k] = v
		}
		w.WriteHeader(buf.status)
		_, _ = w.Write(buf.body.Bytes())
		return
	}
	visible := make([]string, 0, len(cat.Repositories))
	for _, repo := range cat.Repositories {
		if r.access.permission(user, repo) >= permRead {
			visible = append(visible, repo)
		}
	}
	slices.Sort(visible)
	cat.Repositories = visible
	body, _ := json.Marshal(cat) // a struct of strings always encodes
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// statusWriter remembers the status and counts the body bytes written.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(p)
	s.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// bufferWriter holds a whole response in memory.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferWriter) Header() http.Header { return b.header }

func (b *bufferWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
