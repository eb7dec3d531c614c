package imagemanager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
)

// fakeRuntime is a CRI image service in front of a model registry: an
// image can be pulled when its repository is public or the credential's
// user may read it, and a pull of a present image still asks the registry
// (as containerd does). It records every PullImage call.
type fakeRuntime struct {
	mu       sync.Mutex
	images   map[string]*runtimeapi.Image // by name with tag
	refs     map[string]string            // name -> image ID the registry serves
	readers  map[string][]string          // repository -> users; nil = public
	users    map[string]string            // user -> password
	pulls    []pullCall
	down     bool
	statErr  error
	inFlight int
	maxSeen  int
	started  chan string   // receives the image of each pull as it starts, if set
	release  chan struct{} // pulls wait for a token, if set
	// storeFirst makes a pull store the image before it waits for
	// release: a pull whose pod gives up after the runtime stored it.
	storeFirst bool
	// repoDigests are given to every image a pull creates.
	repoDigests []string
}

type pullCall struct {
	image, user string
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{images: map[string]*runtimeapi.Image{}, refs: map[string]string{}, readers: map[string][]string{}, users: map[string]string{}}
}

// serve makes the registry serve name (with tag) as ref, readable by users
// (none: public).
func (f *fakeRuntime) serve(name, ref string, users ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refs[name] = ref
	repo := name[:strings.LastIndexByte(name, ':')]
	if len(users) > 0 {
		f.readers[repo] = users
	}
}

// preload puts an image in the runtime without a pull.
func (f *fakeRuntime) preload(name, ref string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[name] = &runtimeapi.Image{Id: ref, RepoTags: []string{name}, Size: 1234}
}

func (f *fakeRuntime) pullCalls() []pullCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]pullCall(nil), f.pulls...)
}

func (f *fakeRuntime) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statErr != nil {
		return nil, f.statErr
	}
	if img, ok := f.images[spec.Image]; ok {
		return &runtimeapi.ImageStatusResponse{Image: img}, nil
	}
	for _, img := range f.images {
		if img.Id == spec.Image {
			return &runtimeapi.ImageStatusResponse{Image: img}, nil
		}
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (f *fakeRuntime) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	f.mu.Lock()
	user := ""
	if auth != nil {
		user = auth.Username
	}
	f.pulls = append(f.pulls, pullCall{image: spec.Image, user: user})
	f.inFlight++
	f.maxSeen = max(f.maxSeen, f.inFlight)
	started, release, storeFirst := f.started, f.release, f.storeFirst
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	if storeFirst {
		if _, err := f.store(spec, auth); err != nil {
			return "", err
		}
	}
	if started != nil {
		started <- spec.Image
	}
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return "", fmt.Errorf("failed to pull and unpack image %q: %w", spec.Image, ctx.Err())
		}
	}

	return f.store(spec, auth)
}

// store pulls from the model registry and stores the image.
func (f *fakeRuntime) store(spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	user := ""
	if auth != nil {
		user = auth.Username
	}
	name := spec.Image
	if f.down {
		return "", fmt.Errorf("failed to pull and unpack image %q: failed to resolve reference %q: dial tcp 127.0.0.1:5000: connect: connection refused", name, name)
	}
	ref, ok := f.refs[name]
	if !ok {
		return "", fmt.Errorf("failed to pull and unpack image %q: failed to resolve reference %q: %q: not found", name, name, name)
	}
	repo := name
	if i := strings.LastIndexAny(name, ":@"); i > strings.LastIndexByte(name, '/') {
		repo = name[:i]
	}
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	if readers := f.readers[repo]; readers != nil {
		ok := auth != nil && f.users[auth.Username] == auth.Password && auth.Password != ""
		allowed := false
		for _, r := range readers {
			allowed = allowed || r == user
		}
		if !ok || !allowed {
			return "", fmt.Errorf("failed to pull and unpack image %q: failed to resolve reference %q: pulling from host %s failed with status code [manifests %s]: 401 Unauthorized",
				name, name, name[:strings.IndexByte(name, '/')], name[strings.LastIndexByte(name, ':')+1:])
		}
	}
	if img, ok := f.images[name]; ok && img.Id == ref {
		return ref, nil
	}
	f.images[name] = &runtimeapi.Image{Id: ref, RepoTags: []string{name}, RepoDigests: f.repoDigests, Size: 4096}
	return ref, nil
}

func (f *fakeRuntime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.Image
	for _, img := range f.images {
		out = append(out, img)
	}
	return out, nil
}

func (f *fakeRuntime) RemoveImage(_ context.Context, spec *runtimeapi.ImageSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	found := false
	for n, img := range f.images {
		if img.Id == spec.Image || n == spec.Image {
			delete(f.images, n)
			found = true
		}
	}
	if !found {
		return errors.New("image not found")
	}
	return nil
}

func (f *fakeRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (f *fakeRuntime) Close(context.Context) error { return nil }

var _ = credtracker.Image{}
