// Package secureserving serves an http.Handler (pullguard serve's /metrics
// and /healthz) on a node's address the way kube-scheduler and
// kube-controller-manager serve theirs: TLS with a certificate generated at
// start or given as files (reloaded when they change), Kubernetes
// authentication delegated to the API server (TokenReview, and the client
// CAs of the extension-apiserver-authentication ConfigMap) and
// authorization delegated to it (SubjectAccessReview on the request's
// non-resource path), all through k8s.io/apiserver's options and filters,
// with their upstream flag names.
//
// What it adds to them: a request without credentials is anonymous only on
// the paths authorization always allows (/healthz, /readyz, /livez), so a
// scrape of /metrics without a token gets 401; the API server is asked in
// the background, so that a down API server delays nothing but the
// endpoint itself; and bounds on connections, their reads and writes and
// request bodies, so that a client on the node's network cannot exhaust the
// process that serves the CRI.
package secureserving
