package fakeruntime

import (
	"context"
	"fmt"
	"slices"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/imageref"
)

// Runtime is a CRI image service in front of a model registry: a pull
// asks the registry (also for an image it holds, as containerd does) and
// stores the image it serves under the name pulled. Every PullImage call
// is recorded. It is safe for concurrent use; set its fields before its
// first call.
type Runtime struct {
	Images

	// RepoDigests are given to every image a pull stores: the digests the
	// runtime reports it resolved.
	RepoDigests []string
	// Hold, if set, runs in every pull after the registry was asked and
	// before the image is stored (after it with StoreFirst): a pull that
	// waits, or that fails at that point (a context that ends, a step
	// after the store that fails, an error that echoes the credential).
	// Its error ends the pull, as containerd reports it ("failed to pull
	// and unpack image ...: <err>").
	Hold func(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig) error
	// StoreFirst stores the image before Hold runs: a pull whose caller
	// gives up after the runtime stored the image.
	StoreFirst bool

	mu       sync.Mutex
	served   map[string]string   // normalized name → image ID
	readers  map[string][]string // repository → users; none: public
	users    map[string]string   // user → password
	pulls    []Pull
	inFlight int
	maxSeen  int
}

// Pull is one PullImage call: the name asked for and the credential's
// user ("" for an anonymous pull).
type Pull struct {
	Image, User string
}

// Serve makes the registry serve name as the image id, to users only (to
// anyone if none is given; the repository's readers stay as they were).
func (r *Runtime) Serve(name, id string, users ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.served == nil {
		r.served, r.readers = map[string]string{}, map[string][]string{}
	}
	r.served[dockerRef(name)] = id
	if len(users) > 0 {
		r.readers[repository(name)] = users
	}
}

// AddUser gives the registry an account.
func (r *Runtime) AddUser(user, password string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.users == nil {
		r.users = map[string]string{}
	}
	r.users[user] = password
}

// Pulls are the PullImage calls so far, in order.
func (r *Runtime) Pulls() []Pull {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.pulls)
}

// MaxInFlight is the most PullImage calls that ran at once.
func (r *Runtime) MaxInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxSeen
}

// repository is name's normalized repository (name itself if the grammar
// rejects it).
func repository(name string) string {
	if ref, err := imageref.Parse(name); err == nil {
		return ref.Name
	}
	return name
}

func (r *Runtime) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	r.pulls = append(r.pulls, Pull{Image: spec.GetImage(), User: auth.GetUsername()})
	r.inFlight++
	r.maxSeen = max(r.maxSeen, r.inFlight)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	id, err := r.resolve(spec.GetImage(), auth)
	if err != nil {
		return "", err
	}
	if r.StoreFirst {
		r.store(spec.GetImage(), id)
	}
	if r.Hold != nil {
		if err := r.Hold(ctx, spec, auth); err != nil {
			return "", fmt.Errorf("failed to pull and unpack image %q: %w", spec.GetImage(), err)
		}
	}
	r.store(spec.GetImage(), id)
	return id, nil
}

// resolve asks the model registry for name with auth: the image ID it
// serves, or its refusal in containerd's words.
func (r *Runtime) resolve(name string, auth *runtimeapi.AuthConfig) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.served[dockerRef(name)]
	if !ok {
		return "", fmt.Errorf("failed to pull and unpack image %q: failed to resolve reference %q: %q: not found", name, name, name)
	}
	readers := r.readers[repository(name)]
	if len(readers) == 0 {
		return id, nil
	}
	user, password := auth.GetUsername(), auth.GetPassword()
	if password == "" || r.users[user] != password || !slices.Contains(readers, user) {
		host, object := "", ""
		if ref, err := imageref.Parse(name); err == nil {
			host, object = ref.Registry(), ref.Tag+ref.Digest
		}
		return "", fmt.Errorf("failed to pull and unpack image %q: failed to resolve reference %q: pulling from host %s failed with status code [manifests %s]: 401 Unauthorized",
			name, name, host, object)
	}
	return id, nil
}

// store puts the image id under name, as a pull leaves it.
func (r *Runtime) store(name, id string) {
	r.Images.mu.Lock()
	defer r.Images.mu.Unlock()
	if r.Images.byID[id] == nil {
		r.Images.put(&runtimeapi.Image{Id: id, Size: 4096})
	}
	for _, d := range append(slices.Clone(r.RepoDigests), name) {
		r.Images.name(id, d)
	}
}
