package secureserving

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/client-go/kubernetes/scheme"
)

// shutdownTimeout is how long a scrape in flight may take once serve
// stops.
const shutdownTimeout = 2 * time.Second

// Server is the secure endpoint, bound to its port with its certificate
// loaded; Run serves it.
type Server struct {
	opts *Options
	info *server.SecureServingInfo
}

// Listen binds --bind-address:--secure-port and loads the serving
// certificate: --tls-cert-file and --tls-private-key-file (reloaded when
// they change), or the pair in --cert-dir, generated first (self-signed,
// for hostname, localhost and the bind address) when it is not there.
// It asks nothing of the API server. An error (a port in use, a file that
// cannot be read) leaves nothing bound: Run tries again later.
func (o *Options) Listen(hostname string) (*Server, error) {
	// The generated pair's names are set before it is written: a failed
	// attempt forgets them, so that the next one generates it again.
	given := o.Serving.ServerCert.CertKey
	// ApplyTo sets the port to 0 when it cannot bind it.
	port := o.Serving.BindPort
	if err := o.Serving.MaybeDefaultWithSelfSignedCerts(hostname, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		o.Serving.ServerCert.CertKey = given
		return nil, fmt.Errorf("--cert-dir %s: %w", o.Serving.ServerCert.CertDirectory, err)
	}
	var info *server.SecureServingInfo
	if err := o.Serving.ApplyTo(&info); err != nil {
		o.Serving.ServerCert.CertKey = given
		o.Serving.BindPort = port
		// ApplyTo keeps the listener it bound before it failed to load the
		// certificate, and would serve on it next time: close it.
		if o.Serving.Listener != nil {
			_ = o.Serving.Listener.Close()
			o.Serving.Listener = nil
		}
		return nil, fmt.Errorf("--secure-port %d: %w", port, err)
	}
	info.Listener = boundListener(info.Listener)
	return &Server{opts: o, info: info}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.info.Listener.Addr() }

// CertFile is the serving certificate's file, given or generated.
func (s *Server) CertFile() string { return s.opts.Serving.ServerCert.CertKey.CertFile }

// serve serves handler behind authentication and authorization until ctx
// is done. Building them asks the API server for the cluster's
// authentication configuration (the client CAs of the
// extension-apiserver-authentication ConfigMap, unless
// --authentication-skip-lookup): Run calls it in the background, so a
// down API server delays nothing but this endpoint, whose connections
// wait meanwhile; a lookup that fails is tolerated as kube-scheduler
// tolerates it (--authentication-tolerate-lookup-failure, on by default
// here): tokens are still reviewed once the API server answers, client
// certificates are accepted once the ConfigMap could be read, and
// front-proxy (request-header) clients not at all. The returned channel
// is closed when the endpoint has stopped.
func (s *Server) serve(ctx context.Context, handler http.Handler) (<-chan struct{}, error) {
	var authn server.AuthenticationInfo
	if err := s.opts.Authentication.ApplyTo(&authn, s.info, nil); err != nil {
		return nil, fmt.Errorf("--authentication-kubeconfig %s: %w", s.opts.Authentication.RemoteKubeConfigFile, err)
	}
	var authz server.AuthorizationInfo
	if err := s.opts.Authorization.ApplyTo(&authz); err != nil {
		return nil, fmt.Errorf("--authorization-kubeconfig %s: %w", s.opts.Authorization.RemoteKubeConfigFile, err)
	}
	if ctx.Err() != nil {
		return nil, errors.New("serve stopped before the secure endpoint was up")
	}
	authenticator, err := anonymousOnlyOn(authn.Authenticator, s.opts.Authorization.AlwaysAllowPaths)
	if err != nil {
		return nil, fmt.Errorf("--authorization-always-allow-paths: %w", err)
	}
	h := buildHandlerChain(handler, authenticator, authz, authn)
	stopped, _, err := s.info.Serve(h, shutdownTimeout, ctx.Done())
	return stopped, err
}

// buildHandlerChain is kube-scheduler's chain around handler, with the
// request-header configuration passed on (its headers are removed from an
// authenticated request). No handler reads a request's body: net/http
// discards up to 256 KiB of it to keep the connection, within ioTimeout
// (limits.go), and closes the connection past that.
func buildHandlerChain(handler http.Handler, authn authenticatorRequest, authz server.AuthorizationInfo, info server.AuthenticationInfo) http.Handler {
	resolver := &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	handler = genericapifilters.WithAuthorization(handler, authz.Authorizer, scheme.Codecs)
	handler = genericapifilters.WithAuthentication(handler, authn, genericapifilters.Unauthorized(scheme.Codecs), nil, info.RequestHeaderConfig)
	handler = genericapifilters.WithRequestInfo(handler, resolver)
	handler = genericapifilters.WithCacheControl(handler)
	handler = genericfilters.WithHTTPLogging(handler)
	return genericfilters.WithPanicRecovery(handler, resolver)
}

// Close closes the listener: the endpoint is down, whether it served or
// not (serve's own stop is its context's).
func (s *Server) Close() error { return s.info.Listener.Close() }
