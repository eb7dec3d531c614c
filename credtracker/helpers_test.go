package credtracker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
)

var epoch = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

const (
	refApp   = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	refBase  = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	refOther = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
)

// fakeInventory is the runtime's image list; it can be told to fail.
type fakeInventory struct {
	mu     sync.Mutex
	images []credtracker.Image
	err    error
	calls  int
}

func (f *fakeInventory) ListImages(context.Context) ([]credtracker.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return append([]credtracker.Image(nil), f.images...), f.err
}

type env struct {
	t     testing.TB
	dir   string
	clock *clocktesting.FakeClock
	inv   *fakeInventory
	cfg   credtracker.Config
	tr    credtracker.Enabled
}

func newEnv(t testing.TB, cfg credtracker.Config) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), clock: clocktesting.NewFakeClock(epoch), inv: &fakeInventory{}, cfg: cfg}
	e.cfg.Dir = e.dir
	e.start()
	return e
}

// start opens a tracker over the env's directory (a kubelet start).
func (e *env) start() {
	e.t.Helper()
	tr, err := credtracker.New(context.Background(), e.cfg, e.inv, credtracker.WithClock(e.clock), credtracker.WithLogger(ktesting.NewLogger(e.t, ktesting.NewConfig())))
	require.NoError(e.t, err)
	e.tr = tr
	e.t.Cleanup(func() { _ = tr.Close() })
}

// restart closes the tracker and starts a new one over the same state.
func (e *env) restart() {
	e.t.Helper()
	require.NoError(e.t, e.tr.Close())
	e.start()
}

// pull records a successful pull of image as ref with cred.
func (e *env) pull(image, ref string, cred credential.Credential) {
	e.t.Helper()
	require.NoError(e.t, e.tr.RecordPullIntent(image))
	require.NoError(e.t, e.tr.RecordImagePulled(image, ref, cred))
}

func (e *env) hash(registry, user, pass string) credential.Hash {
	return e.tr.Hasher().Hash(registry, credential.AuthConfig{Username: user, Password: pass})
}

func (e *env) secretCred(registry, ns, name, uid, user, pass string) credential.Credential {
	auth := credential.AuthConfig{Username: user, Password: pass}
	return credential.Credential{
		Registry: registry,
		Auth:     auth,
		Source:   credential.Source{Kind: credential.SourceSecret, Namespace: ns, Name: name, UID: uid},
		Hash:     e.tr.Hasher().Hash(registry, auth),
	}
}

func (e *env) saCred(registry, ns, name, uid, token string) credential.Credential {
	auth := credential.AuthConfig{RegistryToken: token}
	return credential.Credential{
		Registry: registry,
		Auth:     auth,
		Source:   credential.Source{Kind: credential.SourceServiceAccount, Namespace: ns, Name: name, UID: uid},
		Hash:     e.tr.Hasher().Hash(registry, auth),
	}
}

func nodeCred(h *credential.Hasher, registry string) credential.Credential {
	auth := credential.AuthConfig{Username: "node", Password: "node-pass"}
	return credential.Credential{Registry: registry, Auth: auth, Source: credential.Source{Kind: credential.SourceNode, Name: "config.json"}, Hash: h.Hash(registry, auth)}
}

func credsFunc(creds ...credential.Credential) func() []credential.Credential {
	return func() []credential.Credential { return creds }
}
