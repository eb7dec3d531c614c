package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/registry"
)

const adminUser = "e2e-admin"

var adminPassword = secretValue("admin")

// secrets are every password the suite made up: none may appear in any
// state, log or output (TestNoCredentialLeaked).
var (
	secretsMu sync.Mutex
	secrets   []string
	outputs   []string // everything pullguard printed
	roots     []string // every pullguard root directory
)

func secretValue(who string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	s := "pw-" + who + "-" + hex.EncodeToString(b)
	secretsMu.Lock()
	secrets = append(secrets, s)
	secretsMu.Unlock()
	return s
}

// tenant is a registry user.
type tenant struct{ user, password string }

func newTenant(user string) *tenant {
	t := &tenant{user: user, password: secretValue(user)}
	h.issuer.setUser(user, t.password)
	return t
}

// rotate gives the tenant a new password at the registry.
func (t *tenant) rotate() {
	t.password = secretValue(t.user)
	h.issuer.setUser(t.user, t.password)
}

// host is the registry as clients see it: the issuer's front address.
func host() string { return h.issuer.addr }

// push pushes a deterministic image to repo:tag and returns its reference.
func push(t *testing.T, repo, tag string, seed int64) string {
	t.Helper()
	img, err := registry.Image(seed, 2, 16<<10)
	require.NoError(t, err)
	ref, err := name.ParseReference(host() + "/" + repo + ":" + tag)
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: adminUser, Password: adminPassword}), remote.WithContext(context.Background())))
	return ref.String()
}

func secretYAML(ns, name string, who *tenant) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Secret
metadata: {name: %s, namespace: %s}
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '{"auths":{"%s":{"username":"%s","password":"%s"}}}'
`, name, ns, host(), who.user, who.password)
}

func podYAML(ns, name, image, policy string, secrets ...string) string {
	var pull string
	for _, s := range secrets {
		pull += fmt.Sprintf("{name: %s}, ", s)
	}
	return fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  imagePullSecrets: [%s]
  containers: [{name: app, image: '%s', imagePullPolicy: %s}]
`, name, ns, strings.TrimSuffix(pull, ", "), image, policy)
}

func saPodYAML(ns, name, sa, image, policy string) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: ServiceAccount
metadata: {name: %s, namespace: %s}
---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  serviceAccountName: %s
  containers: [{name: app, image: '%s', imagePullPolicy: %s}]
`, sa, ns, name, ns, sa, image, policy)
}

// result is one container of `pullguard run -o json`.
type result struct {
	Pod, Container, Image, PullPolicy, ImageRef string
	Pulled                                      bool
	Error, Message                              string
}

type event struct{ Object, Type, Reason, Message string }

type runOutput struct {
	Results []result `json:"results"`
	Events  []event  `json:"events"`
}

func (o runOutput) result(t *testing.T, pod string) result {
	t.Helper()
	for _, r := range o.Results {
		if r.Pod == pod {
			return r
		}
	}
	t.Fatalf("no result for pod %s in %+v", pod, o.Results)
	return result{}
}

func (o runOutput) events(pod string) []event {
	var out []event
	for _, e := range o.Events {
		if e.Object == pod {
			out = append(out, e)
		}
	}
	return out
}

func newRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(h.dir, "root-")
	require.NoError(t, err)
	secretsMu.Lock()
	roots = append(roots, dir)
	secretsMu.Unlock()
	return dir
}

// pullguard runs `pullguard run` on the manifests against containerd.
func pullguard(t *testing.T, root, manifests string, args ...string) runOutput {
	t.Helper()
	f, err := os.CreateTemp(h.dir, "manifests-*.yaml")
	require.NoError(t, err)
	_, err = f.WriteString(manifests)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	argv := append([]string{"run", "-f", f.Name(), "--root-dir", root, "--container-runtime-endpoint", h.containerd.endpoint(), "-o", "json"}, args...)
	cmd := exec.Command(h.binary, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	secretsMu.Lock()
	outputs = append(outputs, stdout.String(), stderr.String())
	secretsMu.Unlock()
	require.NoError(t, err, "pullguard %v: %s", argv, stderr.String())
	var out runOutput
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	return out
}

// traffic is what the registry's own access log says happened for a
// repository since mark.
type traffic struct {
	manifestOK, manifestDenied, blobs int
	last                              request
}

func mark(t *testing.T) int {
	t.Helper()
	require.NoError(t, h.registry.sync())
	return h.registry.log.mark()
}

func trafficFor(t *testing.T, since int, repo string) traffic {
	t.Helper()
	require.NoError(t, h.registry.sync())
	var tr traffic
	for _, r := range h.registry.requests(since) {
		switch {
		case strings.HasPrefix(r.Path, "/v2/"+repo+"/manifests/"):
			if r.Status == 200 {
				tr.manifestOK++
			} else {
				tr.manifestDenied++
			}
			tr.last = r
		case strings.HasPrefix(r.Path, "/v2/"+repo+"/blobs/"):
			tr.blobs++
			tr.last = r
		}
	}
	return tr
}

// registryRequests counts every request of the registry's log since mark.
func registryRequests(t *testing.T, since int) int {
	t.Helper()
	require.NoError(t, h.registry.sync())
	return len(h.registry.requests(since))
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(h.dir, name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}
