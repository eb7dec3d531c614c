package pulltest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The image of every case and the one credential allowed to pull it.
const (
	Host     = "registry.example"
	Repo     = Host + "/team-a/app"
	Image    = Repo + ":v1"
	ID       = "sha256:5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e"
	User     = "alice"
	Password = "alice-pw-4f0c2e9b"
)

// manifest is the bytes the honest registry serves for Image.
var manifest = []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"digest":"` + ID + `"}}`)

// Behaviour is what the fake runtime's PullImage does.
type Behaviour int

const (
	// Store pulls with the registry's rules and stores the image.
	Store Behaviour = iota
	// Refuse fails as a registry's 401, storing nothing.
	Refuse
	// StoreThenCancel stores the image, then the caller's context is
	// cancelled (a deleted pod) and the runtime reports its error.
	StoreThenCancel
	// CancelBeforeStore: the caller's context is cancelled before the
	// runtime stored anything.
	CancelBeforeStore
	// StoreThenDeadline stores the image, then the caller's deadline
	// passes (a kubelet's runtime request timeout).
	StoreThenDeadline
	// StoreThenFail stores the image, then fails with an error of its own.
	StoreThenFail
	// Echo fails with an error that quotes the credential as a registry
	// echoed it, in several encodings.
	Echo
)

// Runtime is a CRI image service in front of a model registry that
// serves Image to User only. It is safe for concurrent use.
type Runtime struct {
	mu     sync.Mutex
	images map[string]*runtimeapi.Image // by ID
	does   Behaviour
	end    func(error) // ends the caller's context
	pulled int         // PullImage calls
}

// pulls is how many times PullImage was called.
func (r *Runtime) pulls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pulled
}

var _ criapi.ImageManagerService = (*Runtime)(nil)

func newRuntime(does Behaviour, end func(error)) *Runtime {
	return &Runtime{images: map[string]*runtimeapi.Image{}, does: does, end: end}
}

// preload puts Image in the runtime without a pull, as a side-load does.
func (r *Runtime) preload() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.images[ID] = image()
}

func image() *runtimeapi.Image {
	sum := sha256.Sum256(manifest)
	return &runtimeapi.Image{Id: ID, RepoTags: []string{Image}, RepoDigests: []string{Repo + "@sha256:" + hex.EncodeToString(sum[:])}, Size: 4096}
}

// id is the ID of the image under name, "" if none.
func (r *Runtime) id(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.find(name).GetId()
}

func (r *Runtime) find(name string) *runtimeapi.Image {
	if img, ok := r.images[name]; ok {
		return img
	}
	for _, img := range r.images {
		for _, tag := range img.RepoTags {
			if tag == name {
				return img
			}
		}
	}
	return nil
}

func (r *Runtime) PullImage(_ context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	r.pulled++
	r.mu.Unlock()
	name := spec.GetImage()
	pulling := fmt.Sprintf("failed to pull and unpack image %q", name)
	switch r.does {
	case Refuse:
		return "", fmt.Errorf("%s: failed to resolve reference %q: pulling from host %s failed with status code [manifests v1]: 401 Unauthorized", pulling, name, Host)
	case Echo:
		pw, _ := json.Marshal(auth.GetPassword())
		return "", fmt.Errorf("%s: unexpected status from GET request: 401 Unauthorized: denied: sent Authorization: Basic %s, password=%s, json=%s", pulling,
			base64.StdEncoding.EncodeToString([]byte(auth.GetUsername()+":"+auth.GetPassword())), auth.GetPassword(), pw)
	case CancelBeforeStore:
		r.end(context.Canceled)
		return "", fmt.Errorf("%s: %w", pulling, context.Canceled)
	}
	if auth.GetUsername() != User || auth.GetPassword() != Password {
		return "", fmt.Errorf("%s: 401 Unauthorized", pulling)
	}
	r.mu.Lock()
	r.images[ID] = image()
	r.mu.Unlock()
	switch r.does {
	case StoreThenCancel:
		r.end(context.Canceled)
		return "", fmt.Errorf("%s: %w", pulling, context.Canceled)
	case StoreThenDeadline:
		r.end(context.DeadlineExceeded)
		return "", fmt.Errorf("%s: %w", pulling, context.DeadlineExceeded)
	case StoreThenFail:
		return "", fmt.Errorf("%s: failed to update image labels: %w", pulling, errors.New("database is locked"))
	}
	return ID, nil
}

func (r *Runtime) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &runtimeapi.ImageStatusResponse{Image: r.find(spec.GetImage())}, nil
}

func (r *Runtime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runtimeapi.Image
	for _, img := range r.images {
		out = append(out, img)
	}
	return out, nil
}

func (r *Runtime) RemoveImage(_ context.Context, spec *runtimeapi.ImageSpec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if img := r.find(spec.GetImage()); img != nil {
		delete(r.images, img.Id)
	}
	return nil
}

func (r *Runtime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (r *Runtime) Close(context.Context) error { return nil }
