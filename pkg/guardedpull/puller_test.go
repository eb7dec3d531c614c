package guardedpull_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

const (
	image = "registry.example/team-a/app:v1"
	id    = "sha256:7777777777777777777777777777777777777777777777777777777777777777"
)

// runtime answers each pull with the error of its user (nil: pulled), and
// remembers who asked.
type runtime struct {
	mu        sync.Mutex
	errs      map[string]error
	users     []string
	statusErr error // ImageStatus's answer, when set
}

func (r *runtime) PullImage(_ context.Context, _ *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.users = append(r.users, auth.GetUsername())
	if err := r.errs[auth.GetUsername()]; err != nil {
		return "", err
	}
	return id, nil
}

func (r *runtime) ImageStatus(context.Context, *runtimeapi.ImageSpec, bool) (*runtimeapi.ImageStatusResponse, error) {
	if r.statusErr != nil {
		return nil, r.statusErr
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

// recorder counts the tracker's calls; its intents fail when failIntent.
type recorder struct {
	failIntent              bool
	intents, pulled, failed int
	cred                    credential.Credential
}

func (r *recorder) RecordPullIntent(string) error {
	if r.failIntent {
		return errors.New("disk full")
	}
	r.intents++
	return nil
}

func (r *recorder) RecordImagePulled(_, _ string, c credential.Credential) error {
	r.pulled, r.cred = r.pulled+1, c
	return nil
}

func (r *recorder) RecordImagePullFailed(string) error { r.failed++; return nil }

var _ credtracker.Recorder = (*recorder)(nil)

func attempt(user, password string) guardedpull.Attempt {
	return guardedpull.Attempt{Credential: credential.Credential{Auth: credential.AuthConfig{Username: user, Password: password},
		Source: credential.Source{Kind: credential.SourceSecret, Namespace: "team-a", Name: user}}}
}

func TestPull(t *testing.T) {
	const pw = "carol-pw-21be07"
	echo := fmt.Sprintf("401 Unauthorized: sent password=%s", pw)
	tests := []struct {
		name       string
		errs       map[string]error
		failIntent bool
		admit      func() error
		attempts   []guardedpull.Attempt

		wantErr     []error // what the error answers errors.Is for
		wantCode    codes.Code
		wantUsers   []string // who reached the runtime, in order
		wantCred    string   // whose credential is recorded
		wantPulled  int
		wantFailed  int
		wantNoIntnt bool
	}{
		{name: "the first refused, the second pulls and is recorded", errs: map[string]error{"bob": errors.New("401 Unauthorized")},
			attempts:  []guardedpull.Attempt{attempt("bob", "bob-pw-1"), attempt("alice", "alice-pw-1")},
			wantUsers: []string{"bob", "alice"}, wantCred: "alice", wantPulled: 1},
		{name: "no credential: one anonymous attempt", wantUsers: []string{""}, wantPulled: 1},
		{name: "admission refused: nothing reaches the runtime", admit: func() error { return errors.New("pull QPS exceeded") },
			attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")}, wantFailed: 1},
		{name: "the intent cannot be written: nothing is pulled", failIntent: true, attempts: []guardedpull.Attempt{attempt("alice", "alice-pw-1")},
			wantErr: []error{guardedpull.ErrNoIntent}, wantNoIntnt: true},
		{name: "a status echoing the credential keeps its code", errs: map[string]error{"carol": status.Error(codes.NotFound, echo)},
			attempts: []guardedpull.Attempt{attempt("carol", pw)}, wantCode: codes.NotFound, wantUsers: []string{"carol"}, wantFailed: 1},
		{name: "an ended context echoing the credential keeps its class", errs: map[string]error{"carol": fmt.Errorf("%s: %w", echo, context.Canceled)},
			attempts: []guardedpull.Attempt{attempt("carol", pw)}, wantErr: []error{context.Canceled}, wantCode: codes.Unknown, wantUsers: []string{"carol"}, wantFailed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &runtime{errs: tt.errs}
			rec := &recorder{failIntent: tt.failIntent}
			p, err := guardedpull.New(rt, rec)
			require.NoError(t, err)

			res, err := p.Pull(context.Background(), guardedpull.Request{Spec: &runtimeapi.ImageSpec{Image: image}, Attempts: tt.attempts, Admit: tt.admit})

			assert.Equal(t, tt.wantUsers, rt.users)
			assert.Equal(t, tt.wantPulled, rec.pulled)
			assert.Equal(t, tt.wantFailed, rec.failed, "intents resolved as failed")
			assert.Equal(t, len(tt.wantUsers) > 0, res.Attempted)
			if tt.wantPulled > 0 {
				require.NoError(t, err)
				assert.Equal(t, id, res.ID)
				assert.Equal(t, tt.wantCred, res.Credential.Source.Name)
				assert.Equal(t, tt.wantCred, rec.cred.Source.Name)
				return
			}
			require.Error(t, err)
			for _, want := range tt.wantErr {
				assert.ErrorIs(t, err, want)
			}
			if tt.wantCode != codes.OK {
				assert.Equal(t, tt.wantCode, status.Code(err))
			}
			assert.Empty(t, leak.Scan(map[string]string{"error": err.Error(), "status": status.Convert(err).Message()}, pw), err.Error())
			assert.Equal(t, tt.wantNoIntnt, rec.intents == 0)
		})
	}
}

// TestFailedPullKeepsItsIntentWhenTheRuntimeCannotSay: after a failed
// pull, a runtime that cannot say whether it stored the image leaves the
// pull's intent unresolved (the name needs verification until a restart
// resolves it against the runtime's images), never resolved as if nothing
// had been stored.
func TestFailedPullKeepsItsIntentWhenTheRuntimeCannotSay(t *testing.T) {
	rt := &runtime{errs: map[string]error{"bob": status.Error(codes.Unknown, "401 Unauthorized")}, statusErr: status.Error(codes.Unavailable, "runtime restarting")}
	rec := &recorder{}
	p, err := guardedpull.New(rt, rec)
	require.NoError(t, err)
	_, err = p.Pull(context.Background(), guardedpull.Request{Spec: &runtimeapi.ImageSpec{Image: image}, Attempts: []guardedpull.Attempt{attempt("bob", "bob-secret")}})
	require.Error(t, err)
	assert.Equal(t, 1, rec.intents)
	assert.Zero(t, rec.failed, "the intent is resolved although the runtime could not say what it holds")
	assert.Zero(t, rec.pulled)
}
