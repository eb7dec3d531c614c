package criruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/internal/dockerauth"
)

// DefaultRegistryConfigPath is containerd's default registry hosts
// directories (the config_path its CRI plugin uses when its configuration
// sets no registry option, containerd v2: its own, then Docker's).
const DefaultRegistryConfigPath = "/etc/containerd/certs.d:/etc/docker/certs.d"

// containerdLog is where containerd's registry library logs (it logs to
// the context's logrus entry): its warnings and errors (a hosts.toml it
// cannot decode, and so ignores, as containerd does) on standard error,
// its information and debug lines (each host directory loaded, the HTTPS
// attempt before plain HTTP on a loopback registry) dropped.
var containerdLog = func() *log.Entry {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return logrus.NewEntry(l)
}()

// manifestAccept is what a manifest GET accepts: the media types
// containerd's resolver asks for.
const manifestAccept = "application/vnd.docker.distribution.manifest.v2+json, " +
	"application/vnd.docker.distribution.manifest.list.v2+json, " +
	"application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, */*"

// registryHosts returns the hosts containerd's CRI plugin reaches for the
// registry host, in its order (the mirrors of the host's hosts.toml
// first, then the upstream unless the file says otherwise), each with its
// client (CAs, client certificates, skip_verify) and an authorizer that
// presents auth as containerd's CRI plugin does. roots is containerd's
// config_path: directories separated by the OS's list separator; a root
// with no directory for the host, or none at all, is no configuration,
// as for containerd. Every client is bounded as a registry's must be
// (boundRegistryTransport, timeout), the authorizer's token fetches
// included; release closes their idle connections (the clients are this
// call's alone).
func registryHosts(ctx context.Context, roots, host string, auth *runtimeapi.AuthConfig, timeout time.Duration) (hosts []docker.RegistryHost, release func(), err error) {
	ctx = log.WithLogger(ctx, containerdLog)
	var dirs []func(string) (string, error)
	for _, root := range filepath.SplitList(roots) {
		dirs = append(dirs, config.HostDirFromRoot(root))
	}
	var bounded []*boundedTransport
	release = func() {
		for _, b := range bounded {
			b.CloseIdleConnections()
		}
	}
	hosts, err = config.ConfigureHosts(ctx, config.HostOptions{
		HostDir: func(host string) (string, error) {
			for _, dir := range dirs {
				d, err := dir(host)
				if d != "" || (err != nil && !errdefs.IsNotFound(err)) {
					return d, err
				}
			}
			return "", errdefs.ErrNotFound
		},
		Credentials: func(host string) (string, string, error) { return hostCredentials(auth, host) },
		// Called with each client containerd makes (its transport, or
		// a host's clone of it), before the authorizer that fetches
		// tokens with that client.
		UpdateClient: func(c *http.Client) error {
			b := boundRegistryTransport(c.Transport, timeout)
			bounded = append(bounded, b)
			c.Transport = b
			return nil
		},
	})(host)
	return hosts, release, err
}

// hostCredentials is what containerd's CRI plugin presents to a host for
// a pull's AuthConfig (its ParseAuth): the credential goes to every host
// of the registry, mirrors included, unless ServerAddress names another
// host; a username with its password, else an identity token, else the
// auth field decoded as containerd decodes it (dockerauth.Containerd:
// padding required, NUL trimmed from the password). A registry token is
// not presented (containerd does not support it): such a pull is
// anonymous.
func hostCredentials(auth *runtimeapi.AuthConfig, host string) (string, string, error) {
	if auth == nil {
		return "", "", nil
	}
	if auth.ServerAddress != "" {
		u, err := url.Parse(auth.ServerAddress)
		if err != nil {
			return "", "", errors.New("the credential's server address is not a URL")
		}
		if u.Host != host {
			return "", "", nil
		}
	}
	switch {
	case auth.Username != "":
		return auth.Username, auth.Password, nil
	case auth.IdentityToken != "":
		return "", auth.IdentityToken, nil
	case auth.Auth != "":
		return dockerauth.Decode(auth.Auth, dockerauth.Containerd)
	}
	return "", "", nil
}

// hostManifest is one host's answer to a manifest GET.
type hostManifest struct {
	body []byte // nil unless the host answered 2xx
	err  error
}

// getManifest GETs the manifest object (a tag or a digest) of repository
// repo from host h, answering a 401's challenge with h's authorizer once,
// as containerd's resolver does (no ping of /v2/ first). registry is the
// registry host of the image's name: a mirror is told it with the ns
// query parameter, as containerd tells it. The manifest may be up to
// maxManifest bytes; every other answer (a token, an error) is bounded
// by h's client (boundRegistryTransport). shares is how many hosts, h
// included, are left to ask: h has 1/shares of the time left to ctx's
// deadline, so that a host that never answers (a mirror that is down and
// drops packets, which containerd's pull waits out at its dial timeout
// before it asks the next host) leaves the next hosts their turn.
func getManifest(ctx context.Context, h docker.RegistryHost, registry, repo, object, userAgent string, shares int) hostManifest {
	if deadline, ok := ctx.Deadline(); ok && shares > 1 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Until(deadline)/time.Duration(shares))
		defer cancel()
	}
	u := url.URL{Scheme: h.Scheme, Host: h.Host, Path: path.Join("/", h.Path, repo, "manifests", object)}
	if isProxy(h.Host, registry) {
		u.RawQuery = url.Values{"ns": {registry}}.Encode()
	}
	var client http.Client
	if h.Client != nil {
		client = *h.Client
	}
	// The transport counts the redirects; each new host is answered as
	// containerd answers it.
	client.CheckRedirect = func(req *http.Request, _ []*http.Request) error { return authorize(ctx, h, req) }
	var resp *http.Response
	for try := 0; try < 2; try++ {
		req, err := http.NewRequestWithContext(withBodyLimit(ctx, maxManifest), http.MethodGet, u.String(), nil)
		if err != nil {
			return hostManifest{err: err}
		}
		for k, v := range h.Header {
			req.Header[k] = append([]string(nil), v...)
		}
		req.Header.Set("Accept", manifestAccept)
		req.Header.Set("User-Agent", userAgent)
		if err := authorize(ctx, h, req); err != nil {
			return hostManifest{err: err}
		}
		if resp, err = client.Do(req); err != nil {
			return hostManifest{err: err}
		}
		if resp.StatusCode != http.StatusUnauthorized || try > 0 || h.Authorizer == nil {
			break
		}
		// The challenge decides how the credential is presented (Basic,
		// or a token fetched with it); a challenge it cannot answer ends
		// the attempt with the 401.
		if h.Authorizer.AddResponses(ctx, []*http.Response{resp}) != nil {
			break
		}
		drain(resp)
	}
	defer drain(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return hostManifest{err: checkStatus(resp, http.StatusOK)}
	}
	body, err := io.ReadAll(resp.Body)
	if errors.Is(err, boundedread.ErrTooLarge) {
		return hostManifest{err: fmt.Errorf("%w: the manifest of %s is larger than %d bytes", ErrUnsupportedManifest, h.Host, maxManifest)}
	}
	if err != nil {
		return hostManifest{err: err}
	}
	return hostManifest{body: body}
}

func authorize(ctx context.Context, h docker.RegistryHost, req *http.Request) error {
	if h.Authorizer == nil {
		return nil
	}
	if err := h.Authorizer.Authorize(ctx, req); err != nil {
		return fmt.Errorf("failed to authorize: %w", err)
	}
	return nil
}

// checkStatus is go-containerregistry's transport.CheckError on the
// first maxTokenBody bytes of resp's body: an error body is an error's,
// whatever the request's own bound, and a longer one keeps its status
// (where CheckError would return only that its body is too long). The
// caller closes resp's body.
func checkStatus(resp *http.Response, codes ...int) error {
	r := *resp
	r.Body = io.NopCloser(io.LimitReader(resp.Body, maxTokenBody))
	return transport.CheckError(&r, codes...)
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxTokenBody))
	resp.Body.Close()
}

// isProxy says whether host serves registry's names as a mirror (its
// requests carry ns=registry), as containerd decides it.
func isProxy(host, registry string) bool {
	return host != registry && (registry != "docker.io" || host != "registry-1.docker.io")
}

// splitName returns the registry host, the repository path and the
// object (a digest if the name has one, else its tag, "latest" if none)
// of image, normalized as containerd's CRI plugin normalizes a name.
func splitName(image string) (host, repo, object string, byDigest bool, err error) {
	named, err := reference.ParseDockerRef(image)
	if err != nil {
		return "", "", "", false, fmt.Errorf("%w: %q: %v", ErrInvalidReference, image, err)
	}
	host, repo = reference.Domain(named), reference.Path(named)
	if d, ok := named.(reference.Digested); ok {
		return host, repo, d.Digest().String(), true, nil
	}
	if t, ok := named.(reference.Tagged); ok {
		return host, repo, t.Tag(), false, nil
	}
	return host, repo, "latest", false, nil
}
