package credtracker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
)

// world is a model of a node: tenants with pull secrets, a registry with
// per-repository read access, and the runtime's images.
type world struct {
	rng     *rand.Rand
	secrets []credential.Source // one pull secret per tenant
	content []int               // the secret's current content version
	// owner of each private repository; public repositories have none.
	owner map[string]int
	// names of the images, and the ref each name resolves to: team
	// repositories and a public one can share a ref (the same bytes).
	refOf map[string]string
	// present images in the runtime, by name.
	present map[string]bool
	// pulledWithCredentials marks names the node pulled with a tenant's
	// credentials (or may have: an interrupted pull) since they were last
	// removed: the images the invariant protects.
	pulledWithCredentials map[string]bool
}

func newWorld(seed uint64) *world {
	w := &world{
		rng:                   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		owner:                 map[string]int{},
		refOf:                 map[string]string{},
		present:               map[string]bool{},
		pulledWithCredentials: map[string]bool{},
	}
	for i := range 4 {
		w.secrets = append(w.secrets, credential.Source{Kind: credential.SourceSecret, Namespace: fmt.Sprintf("tenant-%d", i), Name: "regcred", UID: fmt.Sprintf("uid-%d", i)})
		w.content = append(w.content, 0)
	}
	for i := range 4 {
		for j := range 2 {
			name := fmt.Sprintf("registry.example/tenant-%d/app-%d:v1", i, j)
			w.owner[name] = i
			w.refOf[name] = fmt.Sprintf("sha256:%064x", i*10+j+1)
		}
	}
	// Public images, one of them the same bytes as tenant 0's app-0.
	w.refOf["registry.example/public/base:1"] = w.refOf["registry.example/tenant-0/app-0:v1"]
	w.refOf["registry.example/public/tool:1"] = fmt.Sprintf("sha256:%064x", 999)
	// Some private images are preloaded (side-loaded) from the start.
	w.present["registry.example/tenant-1/app-1:v1"] = true
	w.present["registry.example/tenant-2/app-0:v1"] = true
	return w
}

func (w *world) names() []string {
	var out []string
	for n := range w.refOf {
		out = append(out, n)
	}
	// Deterministic order for a given seed.
	slices.Sort(out)
	return out
}

// cred is tenant t's current secret as the tracker sees it.
func (w *world) cred(h *credential.Hasher, t int) credential.Credential {
	auth := credential.AuthConfig{Username: fmt.Sprintf("tenant-%d", t), Password: fmt.Sprintf("v%d", w.content[t])}
	return credential.Credential{Registry: reg, Auth: auth, Source: w.secrets[t], Hash: h.Hash(reg, auth)}
}

// canRead is the registry's answer for tenant t (or -1: anonymous).
func (w *world) canRead(name string, t int) bool {
	o, private := w.owner[name]
	return !private || o == t
}

func (w *world) presentImages() []credtracker.Image {
	var out []credtracker.Image
	for _, n := range w.names() {
		if w.present[n] {
			out = append(out, credtracker.Image{Ref: w.refOf[n], Names: []string{n}})
		}
	}
	return out
}

// namesOf lists the present names of an image, as the runtime would.
func (w *world) namesOf(ref string) []string {
	var out []string
	for _, n := range w.names() {
		if w.refOf[n] == ref && w.present[n] {
			out = append(out, n)
		}
	}
	return out
}

func (w *world) refPresent(ref string) bool {
	for n, r := range w.refOf {
		if r == ref && w.present[n] {
			return true
		}
	}
	return false
}

func TestSecurityProperty(t *testing.T) {
	for seed := range uint64(credtracker.Scaled(2, 6)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runProperty(t, seed, 1500)
		})
	}
}

func runProperty(t *testing.T, seed uint64, steps int) {
	w := newWorld(seed)
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(epoch)
	inv := credtracker.ImageInventoryFunc(func(context.Context) ([]credtracker.Image, error) { return w.presentImages(), nil })
	policy := credtracker.NeverVerifyPreloadedImages
	start := func() credtracker.Enabled {
		tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: dir, Policy: policy, Allowlist: []string{"registry.example/public/*"}}, inv,
			credtracker.WithClock(clk), credtracker.WithLogger(klog.Background().V(10)))
		require.NoError(t, err)
		return tr
	}
	tr := start()
	defer func() { _ = tr.Close() }()
	names := w.names()
	var protectedUses, refusals int
	policies := []credtracker.Policy{credtracker.NeverVerifyPreloadedImages, credtracker.NeverVerifyAllowlistedImages, credtracker.AlwaysVerify}

	for step := range steps {
		clk.Step(1)
		switch op := w.rng.IntN(100); {
		case op < 70: // a pod starts a container
			name := names[w.rng.IntN(len(names))]
			tenant := w.rng.IntN(len(w.secrets))
			if o, private := w.owner[name]; private && w.rng.IntN(2) == 0 {
				tenant = o // half the pods are the owner's
			}
			hasSecret := w.rng.IntN(3) > 0
			pp := []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullIfNotPresent, corev1.PullNever, corev1.PullAlways}[w.rng.IntN(4)]
			var creds []credential.Credential
			if hasSecret {
				creds = []credential.Credential{w.cred(tr.Hasher(), tenant)}
			}
			ref := ""
			if w.present[name] {
				ref = w.refOf[name]
			}
			if w.rng.IntN(10) == 0 {
				// By its image ID, as runtimes allow: present whenever
				// any name of it is.
				id := w.refOf[name]
				if w.refPresent(id) {
					d := tr.Decide(credtracker.Request{Image: id, ImageRef: id, Names: w.namesOf(id), PullPolicy: pp, Credentials: credsFunc(creds...)})
					if d.Action == credtracker.UseImage {
						for n, r := range w.refOf {
							require.Falsef(t, r == id && w.pulledWithCredentials[n], "step %d: image %s reached by its ID although %s was pulled with credentials (%s, policy %s)", step, id, n, d.Reason, policy)
						}
					}
				}
				break
			}
			d := tr.Decide(credtracker.Request{Image: name, ImageRef: ref, Names: w.namesOf(ref), PullPolicy: pp, Credentials: credsFunc(creds...)})
			switch d.Action {
			case credtracker.UseImage:
				// The invariant: a credential-pulled image is used only by
				// a pod that holds a credential the registry accepts.
				if w.pulledWithCredentials[name] {
					protectedUses++
					require.Truef(t, hasSecret && w.canRead(name, tenant),
						"step %d: tenant %d (secret %v) used %s, pulled with credentials, without access (%s, policy %s)", step, tenant, hasSecret, name, d.Reason, policy)
				}
			case credtracker.Pull:
				require.NoError(t, tr.RecordPullIntent(name))
				t0 := -1
				if hasSecret {
					t0 = tenant
				}
				if !w.canRead(name, t0) {
					refusals++
					require.NoError(t, tr.RecordImagePullFailed(name))
					break
				}
				w.present[name] = true
				var used credential.Credential
				if _, private := w.owner[name]; private {
					used = creds[0]
					w.pulledWithCredentials[name] = true
				}
				require.NoError(t, tr.RecordImagePulled(name, w.refOf[name], used))
			}
		case op < 75: // a pull is interrupted by a crash after the image landed
			name := names[w.rng.IntN(len(names))]
			require.NoError(t, tr.RecordPullIntent(name))
			w.present[name] = true
			if _, private := w.owner[name]; private {
				w.pulledWithCredentials[name] = true
			}
			require.NoError(t, tr.Close())
			tr = start()
		case op < 82: // restart, maybe with another policy
			if w.rng.IntN(2) == 0 {
				policy = policies[w.rng.IntN(len(policies))]
			}
			require.NoError(t, tr.Close())
			tr = start()
		case op < 85: // image garbage collection
			name := names[w.rng.IntN(len(names))]
			ref := w.refOf[name]
			for n, r := range w.refOf {
				if r == ref {
					delete(w.present, n) // removing an image removes all its names
					delete(w.pulledWithCredentials, n)
				}
			}
			listedAt := clk.Now()
			clk.Step(1)
			_, err := tr.PruneImages(w.presentImages(), listedAt)
			require.NoError(t, err)
			require.False(t, w.refPresent(ref))
		case op < 93: // a tenant rotates its secret (the old content stops working)
			tenant := w.rng.IntN(len(w.secrets))
			w.content[tenant]++
		default: // a tenant's secret is deleted and recreated with a new uid
			tenant := w.rng.IntN(len(w.secrets))
			old := w.secrets[tenant]
			require.NoError(t, tr.ForgetSecret(old.Namespace, old.Name, old.UID))
			w.secrets[tenant].UID = fmt.Sprintf("%s-%d", old.UID, step)
		}
	}
	// The run exercised the protection, not only its absence.
	require.Greater(t, protectedUses, 50, "uses of credential-pulled images")
	require.Greater(t, refusals, 20, "registry refusals")
}
