// Package registry holds an embedded OCI distribution registry for
// pullguard's default run (pullguard demo) and for tests:
// go-containerregistry's in-memory registry handler behind a middleware that
// adds users, per-repository access rules and request accounting.
//
// cmd/pullguard (demo, registry) and the tests of imagemanager,
// pkg/criproxy, pkg/criruntime, cmd/pullguard and test/e2e use it; it
// depends on go-containerregistry, x/crypto/bcrypt, klog and
// k8s.io/utils/clock only, and on no pullguard package (docs/imports.txt).
//
// New starts a Registry listening on 127.0.0.1 (a random port unless
// WithAddr names one); the caller should call Close. Access is declared in a
// Config: users with passwords (kept only as bcrypt hashes) and Repository
// rules that make a repository, a prefix of repositories ("team-a/*") or
// every repository ("*") public, readable by all authenticated users,
// readable by named users, or writable by named users. Users listed in
// Config.Pushers, and the registry's own administrator that Push and Copy
// use, may read and write every repository. The most specific rule wins;
// a repository no rule matches is private to the pushers.
//
// Like a distribution registry with htpasswd auth, the registry speaks
// Basic auth only: GET /v2/ and every protected path answer 401 with
// `WWW-Authenticate: Basic realm="pullguard"` when credentials are missing
// or wrong. Valid credentials without access to a repository also answer
// 401 (code UNAUTHORIZED) by default, which is how a distribution registry
// with token auth refuses a pull and how containerd reports it ("401
// Unauthorized"); WithDeniedStatus(http.StatusForbidden) answers 403 DENIED
// instead, as some hosted registries do. Bearer tokens are not issued or
// accepted: an Authorization header of any other scheme is rejected with
// the Basic challenge. Blobs are linked to the repositories they were
// pushed to, so a blob is readable only through a repository that holds
// it, as in distribution.
//
// Every request is recorded (kind, method, repository, reference, status,
// authenticated user, never a password): Requests returns the log in
// completion order, Count counts the entries a Filter matches, and Reset
// clears it. Each request is also logged through klog at verbosity 2, and
// WithAccessLog copies one line per request to an io.Writer in the format
// FormatAccessLogLine documents.
//
// For a "registry unavailable" scenario, Stop closes the listener and every
// connection (clients see connection refused) and Start listens again on
// the same address with the same content; SetDown(true) keeps listening
// but answers every request 503 UNAVAILABLE.
package registry
