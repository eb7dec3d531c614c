package kubelet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/credentialprovider/plugin"
)

// The kubelet's exec credential provider, in process: its own
// RegisterCredentialProviderPlugins reads a CredentialProviderConfig and
// registers its providers, and a look-up through
// NewExternalCredentialProviderDockerKeyring runs a plugin exactly as the
// kubelet's image manager makes it run (encodes the request, execs the
// plugin, decodes and checks its answer, caches it). The plugin
// (testdata/respond) saves its stdin (the kubelet's request) and prints a
// file the test wrote (the answer under test).
//
// The kubelet keeps its providers in a process-wide list, and a provider
// keeps what it cached for its life, on the real clock: each provider
// matches images of its own domain only (*.<name>.test), each case uses
// hosts of its own, and a provider whose answer was cached for every image
// (cacheKeyType Global) is retired for a new one.

// kubeletPlugins is a test's registered providers.
type kubeletPlugins struct {
	dir, bin string
	log      *errorLog

	mu sync.Mutex
	// sa is what the service-account-token providers' kubelet callbacks
	// answer: a service account's annotations and a token.
	sa struct {
		annotations map[string]string
		token       string
	}
}

// execProvider is one registered provider.
type execProvider struct {
	name         string
	apiVersion   string
	defaultCache time.Duration
	saMode       bool
	prefix       string // <prefix>.resp is its answer, <prefix>.req the last request
}

// providerCount numbers the providers of the process: the kubelet's list
// is the process's, and names must not repeat in it.
var providerCount atomic.Int64

// newKubeletPlugins returns a plugin bin directory and answer files in a
// temporary directory of t, and sends the kubelet's log to its errorLog
// for the test. Its providers stay in the kubelet's list after t, never
// matched again (their domains are their own).
func newKubeletPlugins(t testing.TB) *kubeletPlugins {
	t.Helper()
	dir := t.TempDir()
	k := &kubeletPlugins{dir: dir, bin: filepath.Join(dir, "bin"), log: &errorLog{}}
	require.NoError(t, os.Mkdir(k.bin, 0o755))
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "respond"), "./testdata/respond")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./testdata/respond: %s", out)
	k.log.logTo(t)
	return k
}

// register registers a new provider with the kubelet: apiVersion, the
// default cache duration, and service-account-token mode (tokenAttributes
// with cacheType ServiceAccount, v1 only).
func (k *kubeletPlugins) register(t testing.TB, apiVersion string, defaultCache time.Duration, saMode bool) *execProvider {
	t.Helper()
	n := providerCount.Add(1)
	p := &execProvider{name: fmt.Sprintf("p%d", n), apiVersion: apiVersion, defaultCache: defaultCache, saMode: saMode}
	p.prefix = filepath.Join(k.dir, p.name)
	require.NoError(t, os.Symlink(filepath.Join(k.dir, "respond"), filepath.Join(k.bin, p.name)))
	entry := map[string]any{
		"name":                 p.name,
		"matchImages":          []string{"*." + p.name + ".test"},
		"defaultCacheDuration": defaultCache.String(),
		"apiVersion":           apiVersion,
		"args":                 []string{p.prefix},
	}
	if saMode {
		entry["tokenAttributes"] = map[string]any{
			"serviceAccountTokenAudience":          "registry.test",
			"cacheType":                            "ServiceAccount",
			"requireServiceAccount":                true,
			"requiredServiceAccountAnnotationKeys": []string{"example.com/required"},
			"optionalServiceAccountAnnotationKeys": []string{"example.com/optional", "example.com/absent"},
		}
	}
	cfg, err := json.Marshal(map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1",
		"kind":       "CredentialProviderConfig",
		"providers":  []any{entry},
	})
	require.NoError(t, err)
	path := p.prefix + ".config.json"
	require.NoError(t, os.WriteFile(path, cfg, 0o600))
	require.NoError(t, plugin.RegisterCredentialProviderPlugins(path, k.bin, k.serviceAccountToken, k.serviceAccount))
	return p
}

func (k *kubeletPlugins) serviceAccount(namespace, name string) (*corev1.ServiceAccount, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name), Annotations: k.sa.annotations},
	}, nil
}

func (k *kubeletPlugins) serviceAccountToken(_, _ string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := tr.DeepCopy()
	out.Status.Token = k.sa.token
	return out, nil
}

// setServiceAccount sets what the next service-account look-ups get.
func (k *kubeletPlugins) setServiceAccount(annotations map[string]string, token string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sa.annotations, k.sa.token = annotations, token
}

// lookup is one look-up through the kubelet's provider keyring.
type lookup struct {
	creds   []string // "username\x00password", sorted
	ran     bool     // the plugin ran
	refused bool     // the kubelet logged that the provider failed
	request []byte   // what the plugin read, when it ran
}

// lookup looks image up as the kubelet's image manager does for a pod
// with the given service account ("" for none), after setting the
// provider's answer.
func (k *kubeletPlugins) lookup(t testing.TB, p *execProvider, answer []byte, image, serviceAccount string) lookup {
	t.Helper()
	require.NoError(t, os.WriteFile(p.prefix+".resp", answer, 0o600))
	if err := os.Remove(p.prefix + ".req"); err != nil && !errors.Is(err, os.ErrNotExist) {
		require.NoError(t, err)
	}
	k.log.reset()
	found, _ := plugin.NewExternalCredentialProviderDockerKeyring("team-a", "pod-a", "pod-uid-a", serviceAccount).Lookup(image)
	var l lookup
	for _, f := range found {
		l.creds = append(l.creds, f.Username+"\x00"+f.Password)
	}
	sort.Strings(l.creds)
	l.refused = k.log.failed()
	req, err := os.ReadFile(p.prefix + ".req")
	if err == nil {
		l.ran, l.request = true, req
	} else {
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	return l
}

// errorLog is a logr sink that keeps whether the kubelet logged a
// provider's failure ("Failed to provide credentials for image", which
// is how a look-up reports a plugin's refused answer).
type errorLog struct {
	mu         sync.Mutex
	sawFailure bool
}

func (l *errorLog) reset() {
	l.mu.Lock()
	l.sawFailure = false
	l.mu.Unlock()
}

func (l *errorLog) failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sawFailure
}

// logTo sends the kubelet's log to l for the test.
func (l *errorLog) logTo(t testing.TB) {
	klog.SetLogger(logr.New(errorSink{l}))
	t.Cleanup(klog.ClearLogger)
}

type errorSink struct{ l *errorLog }

func (errorSink) Init(logr.RuntimeInfo)            {}
func (errorSink) Enabled(int) bool                 { return false }
func (errorSink) Info(int, string, ...any)         {}
func (s errorSink) WithValues(...any) logr.LogSink { return s }
func (s errorSink) WithName(string) logr.LogSink   { return s }
func (s errorSink) Error(_ error, msg string, _ ...any) {
	if msg == "Failed to provide credentials for image" {
		s.l.mu.Lock()
		s.l.sawFailure = true
		s.l.mu.Unlock()
	}
}
