package secureserving

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server/options"
)

// DefaultPort is the port the DaemonSet gives --secure-port: next to the
// plain endpoint's 10264, clear of the kubelet's (10248, 10250, 10255),
// kube-proxy's (10249, 10256) and the control plane's (10257 to 10259).
const DefaultPort = 10265

// CertDir is the directory, under serve's --root-dir, of the certificate
// generated at start when --cert-dir is not given.
const CertDir = "pki"

// PairName names the generated files: <cert-dir>/pullguard.crt and .key.
const PairName = "pullguard"

// DefaultAlwaysAllowPaths are kube-scheduler's: served to anyone, with or
// without credentials.
var DefaultAlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

// Options are the secure endpoint's flags: k8s.io/apiserver's own option
// sets, with kube-scheduler's defaults but where this package says
// otherwise. The zero port (the default) turns the endpoint off.
type Options struct {
	Serving        *options.SecureServingOptions
	Authentication *options.DelegatingAuthenticationOptions
	Authorization  *options.DelegatingAuthorizationOptions
}

// NewOptions returns the options with their defaults: off (port 0), on
// every address when on, HTTP/2 off, the lookup of the cluster's
// authentication configuration tolerated to fail (as kube-scheduler does),
// the kube-scheduler's always-allowed paths.
func NewOptions() *Options {
	s := options.NewSecureServingOptions()
	s.BindPort = 0
	s.ServerCert.CertDirectory = ""
	s.ServerCert.PairName = PairName
	// One protocol, whose deadlines this package bounds (limits.go); a
	// scrape needs nothing HTTP/2 gives.
	s.DisableHTTP2Serving = true
	authn := options.NewDelegatingAuthenticationOptions()
	authn.TolerateInClusterLookupFailure = true
	authz := options.NewDelegatingAuthorizationOptions()
	authz.AlwaysAllowPaths = append([]string(nil), DefaultAlwaysAllowPaths...)
	return &Options{Serving: s, Authentication: authn, Authorization: authz}
}

// AddFlags registers the upstream flags (--secure-port, --bind-address,
// --cert-dir, --tls-*, --authentication-*, --authorization-*, …) on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Serving.AddFlags(fs)
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
	fs.Lookup("secure-port").Usage = fmt.Sprintf("the port of /metrics and /healthz over TLS with Kubernetes authentication and authorization (%d is the DaemonSet's); 0, the default, turns them off", DefaultPort)
	fs.Lookup("cert-dir").Usage = "the directory of the certificate generated at start when --tls-cert-file and --tls-private-key-file are not given (pullguard.crt, pullguard.key; reused while they exist); default <root-dir>/" + CertDir
	fs.Lookup("disable-http2-serving").Usage = "serve HTTP/1.1 only on --secure-port (the default: pullguard bounds HTTP/1.1's reads and writes; with HTTP/2 on, a connection is closed 30 s after it was last read by the server)"
}

// Enabled says whether the secure endpoint is on.
func (o *Options) Enabled() bool { return o.Serving.BindPort != 0 }

// Complete sets what depends on serve's other flags: the certificate
// directory under rootDir when --cert-dir is not given.
func (o *Options) Complete(rootDir string) {
	if o.Serving.ServerCert.CertDirectory == "" {
		o.Serving.ServerCert.CertDirectory = filepath.Join(rootDir, CertDir)
	}
}

// Validate checks the options without touching the network or the disk.
// With the endpoint on, both kubeconfigs are required: without them the
// upstream options fall back to an in-cluster configuration serve (a host
// daemon) does not have, and then to taking every request for anonymous.
func (o *Options) Validate() error {
	errs := o.Serving.Validate()
	if !o.Enabled() {
		return errors.Join(errs...)
	}
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	if o.Authentication.RemoteKubeConfigFile == "" {
		errs = append(errs, errors.New("--secure-port is set but --authentication-kubeconfig is not: serve does not serve /metrics on the node's address without authenticating its clients (give the kubeconfig of serve's ServiceAccount, docs/serve.md)"))
	}
	if o.Authorization.RemoteKubeConfigFile == "" {
		errs = append(errs, errors.New("--secure-port is set but --authorization-kubeconfig is not: serve asks the API server whether a client may read /metrics (give the kubeconfig of serve's ServiceAccount, docs/serve.md)"))
	}
	c := o.Serving.ServerCert.CertKey
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together: give both, or neither for a certificate generated at start"))
	}
	return errors.Join(errs...)
}
