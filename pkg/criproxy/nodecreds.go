package criproxy

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// DefaultNodeLookupTimeout bounds how long a forwarded pull waits for the
// node keyring (WithNodeKeyring) before it files its credential as a
// pod's.
const DefaultNodeLookupTimeout = 10 * time.Second

// WithNodeKeyring tells the proxy the node's own credentials: k gives, for
// an image, what the kubelet's node keyring gives (the node's docker
// config, keyring.CachedNodeKeyring, and the credential providers that use
// no service account token, credentialprovider.Manager.ForNode). A
// forwarded pull whose credential is one of those for the pulled image
// (the same keyed hash for the image's registry, compared on the username
// and password, which is all the kubelet sends of a node credential) is
// recorded with the node credential's source, as the kubelet records it:
// the image becomes node-accessible, since the kubelet presents that
// credential for every pod's pull of the image anyway. Any other
// credential stays a secret entry of the pod's namespace (recordSource).
//
// The look-up runs beside the pull, from its start, and a pull that
// succeeded waits for it at most timeout from then (<= 0:
// DefaultNodeLookupTimeout), so that it adds nothing to a pull that takes
// longer. It never fails the pull: when k fails or is too slow, the
// credential is filed as the pod's (fail-closed: the image costs other
// pods a verification), and the failure is logged once until a look-up
// succeeds again. The look-up goes on after the pull stops waiting (k
// bounds its own work: a plugin has its timeout), so that its answer is
// cached for the next pull.
func WithNodeKeyring(k keyring.Keyring, timeout time.Duration) Option {
	if timeout <= 0 {
		timeout = DefaultNodeLookupTimeout
	}
	return func(s *Server) { s.node, s.nodeTimeout = k, timeout }
}

// AnnouncedCredentials tells which credentials the node's credential
// provider plugins handed the kubelet, when the kubelet runs them through
// `pullguard credential-provider` (announce.Board). Source returns the
// node source of the announcement that covers auth (a pull's credential,
// canonical fields) for the image im, or false. It must be cheap and
// never block on a plugin: it is asked in every pull whose credential no
// record answered.
type AnnouncedCredentials interface {
	Source(im keyring.Image, auth credential.AuthConfig) (credential.Source, bool)
}

// WithAnnouncedCredentials tells the proxy the credentials that wrapped
// plugins announced: a forwarded pull whose credential is one of them for
// the pulled image is recorded with that node source (the image becomes
// node-accessible), as for a credential of WithNodeKeyring. This is what
// recognises a plugin that mints a token per call, whose token the
// node keyring's own run of the plugin never sees. Asked before the node
// keyring.
func WithAnnouncedCredentials(a AnnouncedCredentials) Option {
	return func(s *Server) { s.announced = a }
}

// nodeLookup is one node keyring answer.
type nodeLookup struct {
	creds []credential.Credential
	err   error
}

// startNodeSource starts finding the source of the node credential that
// cred is for image (im: the image parsed) and returns the function that
// gives it: false when cred is none of them, or the node keyring could not
// tell within the node look-up's time from now. Announced credentials are
// asked at once: they cost no plugin run; the node keyring is asked in
// the background, so that a slow plugin runs beside the pull instead of
// before it, and waited for only by a pull that succeeded.
func (s *Server) startNodeSource(ctx context.Context, logger klog.Logger, image string, im keyring.Image, cred credential.Credential) func() (credential.Source, bool) {
	none := func() (credential.Source, bool) { return credential.Source{}, false }
	if cred.Anonymous() {
		return none
	}
	if s.announced != nil {
		if src, ok := s.announced.Source(im, cred.Auth); ok {
			return func() (credential.Source, bool) { return src, true }
		}
	}
	if s.node == nil {
		return none
	}
	done := make(chan nodeLookup, 1)
	go func() {
		creds, err := s.node.Lookup(context.WithoutCancel(ctx), image)
		done <- nodeLookup{creds: creds, err: err}
	}()
	deadline := time.Now().Add(s.nodeTimeout)
	return func() (credential.Source, bool) {
		wait, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		var res nodeLookup
		select {
		case res = <-done:
		case <-wait.Done():
			res.err = fmt.Errorf("the node keyring did not answer within %v", s.nodeTimeout)
		}
		return s.matchNode(logger, im.Registry, cred, res)
	}
}

// matchNode returns the source of the node credential of res equal to
// cred, presented to registry.
func (s *Server) matchNode(logger klog.Logger, registry string, cred credential.Credential, res nodeLookup) (credential.Source, bool) {
	for _, c := range res.creds {
		if c.Source.Kind != credential.SourceNode {
			continue
		}
		// What the kubelet sends of a node credential: its username and
		// password (docker config entries and plugin answers hold no
		// other field it presents).
		a := credential.AuthConfig{Username: c.Auth.Username, Password: c.Auth.Password}
		if !a.Empty() && s.hasher.Hash(registry, a).Equal(cred.Hash) {
			return c.Source, true
		}
	}
	if res.err == nil {
		s.nodeFailing.Store(false)
		return credential.Source{}, false
	}
	// The keyring's errors hold no credential (keyring.Keyring's contract).
	if s.nodeFailing.CompareAndSwap(false, true) {
		logger.Error(res.err, "Could not tell whether a pull's credential is the node's: filing it as the pod's until the node keyring answers again")
	} else {
		logger.V(4).Info("Could not tell whether a pull's credential is the node's: filing it as the pod's", "err", res.err)
	}
	return credential.Source{}, false
}
