package guardedpull_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/guardedpull"
)

const repo = "registry.example/team-a/app"

// digest and imageID make a manifest digest and an image ID of one hex
// character.
func digest(c string) string  { return "sha256:" + strings.Repeat(c, 64) }
func imageID(c string) string { return "sha256:" + strings.Repeat(c, 63) + "0" }

// tagStore is a runtime holding one image under image's tag; its pull
// names, under the tag, the image of the manifest the registry's tag
// resolves to (moved, when the test moves it).
type tagStore struct {
	mu       sync.Mutex
	current  string // the manifest digest under the tag; "" if none
	resolves string // what a pull resolves the tag to
	pullErr  error
	pulls    int
}

func (s *tagStore) PullImage(context.Context, *runtimeapi.ImageSpec, *runtimeapi.AuthConfig, *runtimeapi.PodSandboxConfig) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pulls++
	if s.pullErr != nil {
		return "", s.pullErr
	}
	s.current = s.resolves
	return imageID(s.current[7:8]), nil
}

func (s *tagStore) ImageStatus(context.Context, *runtimeapi.ImageSpec, bool) (*runtimeapi.ImageStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == "" {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: imageID(s.current[7:8]), RepoTags: []string{image},
		RepoDigests: []string{repo + "@" + s.current}}}, nil
}

// tagRegistry is a Verifier over a registry whose tag serves the manifest
// of digest serves[i] at its i-th request (the last one after), to users
// in readers; it records what each request expected.
type tagRegistry struct {
	serves   []string
	readers  []string
	expected [][]string
}

func (r *tagRegistry) VerifyManifest(_ context.Context, _ string, auth *runtimeapi.AuthConfig, expected []string) (string, error) {
	r.expected = append(r.expected, expected)
	if !slices.Contains(r.readers, auth.GetUsername()) {
		return "", errors.New("401 Unauthorized")
	}
	got := r.serves[min(len(r.expected), len(r.serves))-1]
	if !slices.Contains(expected, got) {
		return got, fmt.Errorf("digest mismatch: served %s, expected %v", got, expected)
	}
	return got, nil
}

// TestHiddenPull: for a present image hidden from the pull's credentials,
// the registry's answer for the present image stands for the pull (no
// runtime pull); other bytes (a moved tag) go to the runtime's pull, whose
// verification uses those bytes when the runtime resolved the tag to
// them, and asks again otherwise; a refused credential goes to the
// runtime's pull, as does an Always pull (not Hidden).
func TestHiddenPull(t *testing.T) {
	tests := []struct {
		name      string
		hidden    bool
		present   string   // the manifest digest present under the tag; "" none
		resolves  string   // what the runtime's pull resolves the tag to
		serves    []string // what the registry's tag serves, request by request
		attempts  []guardedpull.Attempt
		pullErr   error
		wantErr   bool
		wantPulls int
		wantAsked [][]string // what each Verifier request expected
		wantID    string
		wantCred  string
	}{
		{name: "the registry serves the present image: answered without the runtime", hidden: true, present: digest("a"), serves: []string{digest("a")},
			attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")}, pullErr: errors.New("not asked"),
			wantAsked: [][]string{{digest("a")}}, wantID: imageID("a"), wantCred: "alice"},
		{name: "the tag moved: the runtime's pull of the new image is proved by the bytes served before it", hidden: true, present: digest("a"), resolves: digest("b"),
			serves: []string{digest("b")}, attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")},
			wantPulls: 1, wantAsked: [][]string{{digest("a")}}, wantID: imageID("b"), wantCred: "alice"},
		{name: "the tag moved again during the pull: verified again", hidden: true, present: digest("a"), resolves: digest("c"),
			serves: []string{digest("b"), digest("c")}, attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")},
			wantPulls: 1, wantAsked: [][]string{{digest("a")}, {digest("c")}}, wantID: imageID("c"), wantCred: "alice"},
		{name: "the first credential refused, the second served the present image", hidden: true, present: digest("a"), serves: []string{digest("a")},
			attempts: []guardedpull.Attempt{attempt("bob", "bob-pw-1"), attempt("alice", "alice-pw-1")}, pullErr: errors.New("401 Unauthorized"),
			wantAsked: [][]string{{digest("a")}, {digest("a")}}, wantID: imageID("a"), wantCred: "alice"},
		{name: "refused by the registry: the runtime's pull decides", hidden: true, present: digest("a"), serves: []string{digest("a")},
			attempts: []guardedpull.Attempt{attempt("bob", "bob-pw-1")}, pullErr: errors.New("401 Unauthorized"),
			wantPulls: 1, wantAsked: [][]string{{digest("a")}}, wantErr: true},
		{name: "an Always pull asks the runtime, then verifies", present: digest("a"), resolves: digest("a"), serves: []string{digest("a")},
			attempts:  []guardedpull.Attempt{attempt("alice", "alice-pw-1")},
			wantPulls: 1, wantAsked: [][]string{{digest("a")}}, wantID: imageID("a"), wantCred: "alice"},
		{name: "nothing present: the runtime pulls, then verifies", hidden: true, resolves: digest("a"), serves: []string{digest("a")},
			attempts:  []guardedpull.Attempt{attempt("alice", "alice-pw-1")},
			wantPulls: 1, wantAsked: [][]string{{digest("a")}}, wantID: imageID("a"), wantCred: "alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &tagStore{current: tt.present, resolves: tt.resolves, pullErr: tt.pullErr}
			reg := &tagRegistry{serves: tt.serves, readers: []string{"alice"}}
			rec := &recorder{}
			p, err := guardedpull.New(rt, rec, guardedpull.WithVerifier(reg))
			require.NoError(t, err)

			res, err := p.Pull(context.Background(), guardedpull.Request{Spec: &runtimeapi.ImageSpec{Image: image}, Attempts: tt.attempts, Hidden: tt.hidden})

			assert.Equal(t, tt.wantPulls, rt.pulls, "the runtime's pulls")
			assert.Equal(t, tt.wantAsked, reg.expected, "the registry's manifest requests")
			assert.Equal(t, tt.wantPulls > 0, res.Attempted)
			if tt.wantErr {
				require.Error(t, err)
				assert.Zero(t, rec.pulled)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantID, res.ID)
			assert.Equal(t, tt.wantID, res.Ref, "the runtime's image ref, as a pull answers it")
			assert.Equal(t, 1, rec.pulled)
			assert.Equal(t, tt.wantCred, rec.cred.Source.Name)
		})
	}
}
