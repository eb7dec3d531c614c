package keyring

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/pkg/credential"
)

// NodeConfigLifetime is how long the kubelet keeps the node's docker
// config before it reads the files again (the Lifetime of its
// CachingDockerConfigProvider, k8s.io/kubernetes pkg/credentialprovider).
const NodeConfigLifetime = 5 * time.Minute

// CachedNodeKeyring returns the node docker config keyring as the kubelet
// keeps it: the first look-up reads files (NodeKeyring), and the result,
// an empty one included, serves every look-up for NodeConfigLifetime on
// clk; the first look-up after that reads the files again. So a changed
// file (a rotated credential) counts at most NodeConfigLifetime after the
// kubelet could first have seen it, and an old credential stops counting
// as soon as the files are read again.
//
// onErr, when not nil, gets the error of each read that passed over a file
// (*ConfigFileError values, which never hold credential material): at most
// one call per NodeConfigLifetime. Lookup itself reports no error. h must
// not be nil; a nil clk is the real clock.
func CachedNodeKeyring(h *credential.Hasher, files []string, clk clock.PassiveClock, onErr func(error)) Keyring {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &cachedNode{hasher: h, files: files, clock: clk, onErr: onErr}
}

type cachedNode struct {
	hasher *credential.Hasher
	files  []string
	clock  clock.PassiveClock
	onErr  func(error)

	mu      sync.Mutex
	current Keyring
	expires time.Time
}

var _ Keyring = (*cachedNode)(nil)

// Lookup implements Keyring.
func (c *cachedNode) Lookup(ctx context.Context, image string) ([]credential.Credential, error) {
	return c.keyring().Lookup(ctx, image)
}

// keyring returns the keyring read last, reading the files again once it
// is NodeConfigLifetime old. Reads are serialized, as in the kubelet; each
// is bounded by the size limit of a node config file.
func (c *cachedNode) keyring() Keyring {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if c.current != nil && now.Before(c.expires) {
		return c.current
	}
	kr, err := NodeKeyring(c.hasher, c.files)
	if err != nil && c.onErr != nil {
		c.onErr(err)
	}
	c.current, c.expires = kr, now.Add(NodeConfigLifetime)
	return kr
}
