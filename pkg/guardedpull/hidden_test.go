package guardedpull_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
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
// in readers; it records what each request expected. Anyone else is
// refused with refusal (a 401 when nil). When stall is set, a request
// waits for its context to end.
type tagRegistry struct {
	serves   []string
	readers  []string
	refusal  error
	stall    bool
	expected [][]string
}

func (r *tagRegistry) VerifyManifest(ctx context.Context, _ string, auth *runtimeapi.AuthConfig, expected []string) (string, error) {
	r.expected = append(r.expected, expected)
	if r.stall {
		<-ctx.Done()
		return "", fmt.Errorf("GET https://registry.example/v2/team-a/app/manifests/v1: %w", ctx.Err())
	}
	if !slices.Contains(r.readers, auth.GetUsername()) {
		if r.refusal != nil {
			return "", r.refusal
		}
		return "", fmt.Errorf("%w: 401 Unauthorized", criruntime.ErrUnauthorized)
	}
	got := r.serves[min(len(r.expected), len(r.serves))-1]
	if !slices.Contains(expected, got) {
		return got, fmt.Errorf("digest mismatch: served %s, expected %v", got, expected)
	}
	return got, nil
}

// TestPresentImagePull: for an image present under the pulled name (an
// IfNotPresent pull hidden from the pod's credentials, or an Always pull),
// the registry's answer for the present image stands for the pull (no
// runtime pull); other bytes (a moved tag) go to the runtime's pull, whose
// verification uses those bytes when the runtime resolved the tag to them,
// and asks again otherwise; a refused credential, or a manifest the
// registry does not know, ends the attempt without the runtime's pull,
// which would be refused the same; any other failure lets the runtime
// decide. An absent image goes to the runtime, then its check.
func TestPresentImagePull(t *testing.T) {
	notFound := fmt.Errorf("%w: 404 Not Found", criruntime.ErrNotFound)
	tests := []struct {
		name      string
		present   string   // the manifest digest present under the tag; "" none
		resolves  string   // what the runtime's pull resolves the tag to
		serves    []string // what the registry's tag serves, request by request
		refusal   error    // the registry's answer to a credential it refuses
		attempts  []guardedpull.Attempt
		pullErr   error
		wantErr   error // an error class; nil: the pull succeeds
		wantPulls int
		wantAsked [][]string // what each Verifier request expected
		wantID    string
		wantCred  string
	}{
		{name: "the registry serves the present image: answered without the runtime", present: digest("a"), serves: []string{digest("a")},
			attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")}, pullErr: errors.New("not asked"),
			wantAsked: [][]string{{digest("a")}}, wantID: imageID("a"), wantCred: "alice"},
		{name: "the tag moved: the runtime's pull of the new image is proved by the bytes served before it", present: digest("a"), resolves: digest("b"),
			serves: []string{digest("b")}, attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")},
			wantPulls: 1, wantAsked: [][]string{{digest("a")}}, wantID: imageID("b"), wantCred: "alice"},
		{name: "the tag moved again during the pull: verified again", present: digest("a"), resolves: digest("c"),
			serves: []string{digest("b"), digest("c")}, attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")},
			wantPulls: 1, wantAsked: [][]string{{digest("a")}, {digest("c")}}, wantID: imageID("c"), wantCred: "alice"},
		{name: "the first credential refused, the second served the present image", present: digest("a"), serves: []string{digest("a")},
			attempts: []guardedpull.Attempt{attempt("bob", "bob-pw-1"), attempt("alice", "alice-pw-1")}, pullErr: errors.New("not asked"),
			wantAsked: [][]string{{digest("a")}, {digest("a")}}, wantID: imageID("a"), wantCred: "alice"},
		{name: "refused by the registry: the refusal, without the runtime's pull", present: digest("a"), serves: []string{digest("a")},
			attempts: []guardedpull.Attempt{attempt("bob", "bob-pw-1")}, pullErr: errors.New("not asked"),
			wantAsked: [][]string{{digest("a")}}, wantErr: criruntime.ErrUnauthorized},
		{name: "a manifest the registry does not know: its answer, without the runtime's pull", present: digest("a"), serves: []string{digest("a")},
			refusal: notFound, attempts: []guardedpull.Attempt{attempt("bob", "bob-pw-1")}, pullErr: errors.New("not asked"),
			wantAsked: [][]string{{digest("a")}}, wantErr: criruntime.ErrNotFound},
		{name: "the first credential refused, the runtime pulls the moved tag with the second", present: digest("a"), resolves: digest("b"),
			serves: []string{digest("b")}, attempts: []guardedpull.Attempt{attempt("bob", "bob-pw-1"), attempt("alice", "alice-pw-1")},
			wantPulls: 1, wantAsked: [][]string{{digest("a")}, {digest("a")}}, wantID: imageID("b"), wantCred: "alice"},
		{name: "the registry failed otherwise: the runtime's pull decides", present: digest("a"), serves: []string{digest("a")},
			refusal: errors.New("503 Service Unavailable"), attempts: []guardedpull.Attempt{attempt("bob", "bob-pw-1")}, pullErr: errors.New("503 Service Unavailable"),
			wantPulls: 1, wantAsked: [][]string{{digest("a")}}, wantErr: errRuntime},
		{name: "nothing present: the runtime pulls, then verifies", resolves: digest("a"), serves: []string{digest("a")},
			attempts:  []guardedpull.Attempt{attempt("alice", "alice-pw-1")},
			wantPulls: 1, wantAsked: [][]string{{digest("a")}}, wantID: imageID("a"), wantCred: "alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &tagStore{current: tt.present, resolves: tt.resolves, pullErr: tt.pullErr}
			reg := &tagRegistry{serves: tt.serves, readers: []string{"alice"}, refusal: tt.refusal}
			rec := &recorder{}
			p, err := guardedpull.New(rt, rec, guardedpull.WithVerifier(reg))
			require.NoError(t, err)

			res, err := p.Pull(context.Background(), guardedpull.Request{Spec: &runtimeapi.ImageSpec{Image: image}, Attempts: tt.attempts})

			assert.Equal(t, tt.wantPulls, rt.pulls, "the runtime's pulls")
			assert.Equal(t, tt.wantAsked, reg.expected, "the registry's manifest requests")
			assert.Equal(t, tt.wantPulls > 0, res.Attempted)
			if tt.wantErr != nil {
				require.Error(t, err)
				if tt.wantErr != errRuntime {
					assert.ErrorIs(t, err, tt.wantErr)
					assert.ErrorIs(t, err, guardedpull.ErrRefused)
				} else {
					assert.NotErrorIs(t, err, guardedpull.ErrRefused)
				}
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

// errRuntime stands for the runtime's own error in TestPresentImagePull.
var errRuntime = errors.New("the runtime's error")

// TestVerifyTimeout: a registry that stalls the Verifier adds at most the
// verification's time to a pull: a stalled check of a present image ends
// the pull with DeadlineExceeded, the runtime not asked; the check after a
// runtime's pull has what the check before it left.
func TestVerifyTimeout(t *testing.T) {
	tests := []struct {
		name      string
		present   string
		wantPulls int
	}{
		{name: "the present image's check stalls", present: digest("a")},
		{name: "the check after a first pull stalls", wantPulls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &tagStore{current: tt.present, resolves: digest("b")}
			reg := &tagRegistry{readers: []string{"alice"}, stall: true}
			rec := &recorder{}
			const limit = 50 * time.Millisecond
			p, err := guardedpull.New(rt, rec, guardedpull.WithVerifier(reg), guardedpull.WithVerifyTimeout(limit))
			require.NoError(t, err)

			start := time.Now()
			_, err = p.Pull(context.Background(), guardedpull.Request{Spec: &runtimeapi.ImageSpec{Image: image}, Attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")}})
			took := time.Since(start)

			require.Error(t, err)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Contains(t, err.Error(), "registry.example", "the error names the host")
			assert.Equal(t, tt.wantPulls, rt.pulls, "the runtime's pulls")
			assert.Len(t, reg.expected, 1, "one check, cut at the limit")
			assert.Less(t, took, 10*limit, "the pull ends at the verification's limit, not the caller's")
			assert.Zero(t, rec.pulled)
		})
	}
}

// slowRegistry answers after taking d of the caller's time, counted on
// the caller's clock: it waits for the context when that ends first.
type slowRegistry struct {
	d       time.Duration
	serves  []string
	asked   int
	budgets []time.Duration // the time each call had left
}

func (r *slowRegistry) VerifyManifest(ctx context.Context, _ string, _ *runtimeapi.AuthConfig, expected []string) (string, error) {
	deadline, _ := ctx.Deadline()
	r.budgets = append(r.budgets, time.Until(deadline))
	got := r.serves[min(r.asked, len(r.serves)-1)]
	r.asked++
	timer := time.NewTimer(r.d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return "", fmt.Errorf("GET https://registry.example/v2/team-a/app/manifests/v1: %w", ctx.Err())
	}
	if !slices.Contains(expected, got) {
		return got, fmt.Errorf("digest mismatch: served %s", got)
	}
	return got, nil
}

// TestVerifyBudgetIsShared: the check before the runtime's pull and the
// check after it share one limit: a registry that answers the first slowly
// (other bytes: the tag moved) and the second more slowly still cannot add
// more than the limit to the pull.
func TestVerifyBudgetIsShared(t *testing.T) {
	// Each answer takes 60% of the limit: the first fits with room to
	// spare on a busy machine, the second cannot.
	const limit = 500 * time.Millisecond
	rt := &tagStore{current: digest("a"), resolves: digest("c")}
	reg := &slowRegistry{d: limit * 6 / 10, serves: []string{digest("b"), digest("c")}}
	p, err := guardedpull.New(rt, &recorder{}, guardedpull.WithVerifier(reg), guardedpull.WithVerifyTimeout(limit))
	require.NoError(t, err)

	_, err = p.Pull(context.Background(), guardedpull.Request{Spec: &runtimeapi.ImageSpec{Image: image}, Attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")}})

	require.Error(t, err, "the second check runs out of what the first left")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, guardedpull.ErrUnverified)
	require.Len(t, reg.budgets, 2)
	assert.LessOrEqual(t, reg.budgets[1], limit-reg.d, "the second check had only what the first left")
	assert.Equal(t, 1, rt.pulls)
}
