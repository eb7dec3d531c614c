// Package fakeapiserver is, for tests only, the part of a Kubernetes API
// server that a component delegating its authentication and authorization
// talks to: TokenReview, SubjectAccessReview and the
// extension-apiserver-authentication ConfigMap, over TLS on 127.0.0.1,
// with a kubeconfig for it.
package fakeapiserver

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
)

// ServingCertFiles writes a self-signed certificate for localhost and
// 127.0.0.1 and its key, as an operator gives them to a component's
// secure endpoint (--tls-cert-file, --tls-private-key-file).
func ServingCertFiles(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(certFile, cert, 0o600))
	require.NoError(t, os.WriteFile(keyFile, key, 0o600))
	return certFile, keyFile
}

// ClientToken is the token of the kubeconfig Start writes: the identity of
// the component under test. The server answers no other client.
const ClientToken = "component-sa-token"

// Server is a running fake API server.
type Server struct {
	// Kubeconfig is the file of a kubeconfig for it, with ClientToken.
	Kubeconfig string
	// Users are the tokens TokenReview authenticates, and their user names.
	// Allowed are the user names SubjectAccessReview allows to get
	// /metrics. Set both before the first request.
	Users   map[string]string
	Allowed map[string]bool

	srv  *httptest.Server
	quit chan struct{}
	mu   sync.Mutex
	sars []authzv1.SubjectAccessReviewSpec
}

// Start starts the server on 127.0.0.1, stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{Users: map[string]string{}, Allowed: map[string]bool{}, quit: make(chan struct{})}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.StartTLS()
	t.Cleanup(func() {
		close(s.quit)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	s.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: component
  user:
    token: %s
contexts:
- name: fake
  context: {cluster: fake, user: component}
current-context: fake
`, s.srv.URL, encodeBase64(ca), ClientToken)
	require.NoError(t, os.WriteFile(s.Kubeconfig, []byte(kc), 0o600))
	return s
}

// SubjectAccessReviews are the reviews asked so far.
func (s *Server) SubjectAccessReviews() []authzv1.SubjectAccessReviewSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]authzv1.SubjectAccessReviewSpec(nil), s.sars...)
}

const configMapPath = "/api/v1/namespaces/kube-system/configmaps"

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+ClientToken {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/apis/authentication.k8s.io/v1/tokenreviews":
		var tr authnv1.TokenReview
		if err := json.Unmarshal(body, &tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if name, ok := s.Users[tr.Spec.Token]; ok {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: name, Groups: []string{"system:authenticated"}}}
		}
		tr.Spec.Token = ""
		writeJSON(w, &tr)
	case r.Method == http.MethodPost && r.URL.Path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		var sar authzv1.SubjectAccessReview
		if err := json.Unmarshal(body, &sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.sars = append(s.sars, sar.Spec)
		s.mu.Unlock()
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = na != nil && na.Path == "/metrics" && na.Verb == "get" && s.Allowed[sar.Spec.User]
		writeJSON(w, &sar)
	case r.Method == http.MethodGet && r.URL.Path == configMapPath+"/extension-apiserver-authentication":
		writeJSON(w, s.configMap())
	case r.Method == http.MethodGet && r.URL.Path == configMapPath && r.URL.Query().Get("watch") == "true":
		// A watch with no event, open until the client or the test ends.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-s.quit:
		}
	case r.Method == http.MethodGet && r.URL.Path == configMapPath:
		writeJSON(w, &corev1.ConfigMapList{
			TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "1"},
			Items:    []corev1.ConfigMap{*s.configMap()},
		})
	default:
		http.NotFound(w, r)
	}
}

// configMap is the API server's extension-apiserver-authentication, its
// CAs the fake's own certificate.
func (s *Server) configMap() *corev1.ConfigMap {
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}))
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication", ResourceVersion: "1"},
		Data: map[string]string{
			"client-ca-file":                     ca,
			"requestheader-client-ca-file":       ca,
			"requestheader-allowed-names":        `["front-proxy-client"]`,
			"requestheader-username-headers":     `["X-Remote-User"]`,
			"requestheader-group-headers":        `["X-Remote-Group"]`,
			"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
		},
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
