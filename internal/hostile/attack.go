package hostile

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// tokenPath is the realm HugeToken names: the registry's own.
const tokenPath = "/token"

// filler is what the endless answers repeat.
var filler = bytes.Repeat([]byte("a"), 32<<10)

// attacks says whether req is one the registry's resource mode attacks:
// pullguard's manifest GETs, in the modes that challenge also its ping of
// /v2/ (so that a client that asks /v2/ first parses the challenge too),
// and in HugeToken every request to the realm.
func (r *Registry) attacks(req *http.Request) bool {
	if r.mode < StallAfterHeaders || req.Method == http.MethodHead {
		return false
	}
	if r.mode == HugeToken && req.URL.Path == tokenPath {
		return true
	}
	if !strings.Contains(req.UserAgent(), "pullguard") {
		return false
	}
	challenges := r.mode == HugeToken || r.mode == ManyChallenges || r.mode == EscapedChallenge
	return strings.Contains(req.URL.Path, "/manifests/") || (challenges && strings.TrimSuffix(req.URL.Path, "/") == "/v2")
}

// attackClient answers a GET of a manifest (or of the token realm) as
// the resource mode says, and returns the status it sent. Every answer
// that does not end by itself ends when the client goes or the registry
// is closed.
func (r *Registry) attackClient(w http.ResponseWriter, req *http.Request) int {
	r.attack()
	switch r.mode {
	case StallAfterHeaders:
		r.headers(w, "application/vnd.docker.distribution.manifest.v2+json")
		r.hold(req)
	case OneBytePerSecond:
		r.headers(w, "application/vnd.docker.distribution.manifest.v2+json")
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i = (i + 1) % len(bogus) {
			if _, err := w.Write([]byte{bogus[i]}); err != nil {
				break
			}
			w.(http.Flusher).Flush()
			if !r.wait(req, tick.C) {
				break
			}
		}
	case HugeToken:
		if req.URL.Path != tokenPath {
			w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+req.Host+tokenPath+`",service="hostile"`)
			w.WriteHeader(http.StatusUnauthorized)
			return http.StatusUnauthorized
		}
		r.headers(w, "application/json")
		r.endless(w, req, `{"token":"`)
	case HugeManifest:
		r.headers(w, "application/vnd.docker.distribution.manifest.v2+json")
		r.endless(w, req, `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","annotations":{"a":"`)
	case RedirectLoop:
		http.Redirect(w, req, req.URL.RequestURI(), http.StatusTemporaryRedirect)
		return http.StatusTemporaryRedirect
	case ManyChallenges:
		h := w.Header()
		challenge := `Bearer realm="http://` + req.Host + tokenPath + `",service="hostile"`
		for range Challenges {
			h.Add("WWW-Authenticate", challenge)
		}
		w.WriteHeader(http.StatusUnauthorized)
		return http.StatusUnauthorized
	case EscapedChallenge:
		var b strings.Builder
		b.WriteString(`Bearer realm="http://` + req.Host + tokenPath + `"`)
		for i := 0; b.Len() < EscapedChallengeBytes-16; i++ {
			fmt.Fprintf(&b, `,k%d="\a"`, i)
		}
		w.Header().Set("WWW-Authenticate", b.String())
		w.WriteHeader(http.StatusUnauthorized)
		return http.StatusUnauthorized
	}
	return http.StatusOK
}

// headers sends a 200's headers with no Content-Length, at once.
func (r *Registry) headers(w http.ResponseWriter, contentType string) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Docker-Content-Digest", r.claimed)
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

// endless sends prefix, then filler until the client stops reading.
func (r *Registry) endless(w http.ResponseWriter, req *http.Request, prefix string) {
	if _, err := w.Write([]byte(prefix)); err != nil {
		return
	}
	for {
		select {
		case <-r.stop:
			return
		case <-req.Context().Done():
			return
		default:
		}
		if _, err := w.Write(filler); err != nil {
			return
		}
	}
}

// hold returns when the client goes or the registry is closed.
func (r *Registry) hold(req *http.Request) { r.wait(req, nil) }

// wait waits for next; false when the client went or the registry was
// closed first.
func (r *Registry) wait(req *http.Request, next <-chan time.Time) bool {
	select {
	case <-r.stop:
		return false
	case <-req.Context().Done():
		return false
	case <-next:
		return true
	}
}
