package pulltest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/fakeruntime"
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

// repoDigest is Image's repo digest: its manifest's digest in Repo.
func repoDigest() string {
	sum := sha256.Sum256(manifest)
	return Repo + "@sha256:" + hex.EncodeToString(sum[:])
}

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

// newRuntime is a runtime in front of a registry that serves Image to User
// only, whose pulls do what does says; end ends the caller's context.
func newRuntime(does Behaviour, end func(error)) *fakeruntime.Runtime {
	rt := &fakeruntime.Runtime{RepoDigests: []string{repoDigest()}}
	rt.AddUser(User, Password)
	rt.Serve(Image, ID, User)
	switch does {
	case Refuse:
		rt.Serve(Image, ID, "nobody") // a user with no account: every credential is refused
	case StoreThenCancel, StoreThenDeadline, StoreThenFail:
		rt.StoreFirst = true
	}
	ends := map[Behaviour]error{CancelBeforeStore: context.Canceled, StoreThenCancel: context.Canceled, StoreThenDeadline: context.DeadlineExceeded}
	switch {
	case ends[does] != nil:
		rt.Hold = func(context.Context, *runtimeapi.ImageSpec, *runtimeapi.AuthConfig) error {
			end(ends[does])
			return ends[does]
		}
	case does == StoreThenFail:
		rt.Hold = func(context.Context, *runtimeapi.ImageSpec, *runtimeapi.AuthConfig) error {
			return fmt.Errorf("failed to update image labels: %w", errors.New("database is locked"))
		}
	case does == Echo:
		rt.Hold = func(_ context.Context, _ *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig) error {
			pw, _ := json.Marshal(auth.GetPassword())
			return fmt.Errorf("unexpected status from GET request: 401 Unauthorized: denied: sent Authorization: Basic %s, password=%s, json=%s",
				base64.StdEncoding.EncodeToString([]byte(auth.GetUsername()+":"+auth.GetPassword())), auth.GetPassword(), pw)
		}
	}
	return rt
}

// preload puts Image in rt without a pull, as a side-load does.
func preload(rt *fakeruntime.Runtime) {
	rt.Add(&runtimeapi.Image{Id: ID, RepoTags: []string{Image}, RepoDigests: []string{repoDigest()}, Size: 4096})
}
