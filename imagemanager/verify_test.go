package imagemanager_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// verifierCalls records what the manager asked a verifier.
type verifierCalls struct {
	mu    sync.Mutex
	calls [][]string // expected digests per call
	err   error
}

func (v *verifierCalls) verify(_ context.Context, _ string, _ *runtimeapi.AuthConfig, expected []string) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls = append(v.calls, expected)
	return "sha256:served", v.err
}

func TestManifestVerification(t *testing.T) {
	const digestRef = "registry.example/public/tool@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	tests := []struct {
		name         string
		image        string
		repoDigests  []string
		verifierErr  error
		wantErr      error
		wantCalls    int
		wantExpected []string
	}{
		{name: "the runtime's repo digest of the pulled repository is expected", image: pubImage,
			repoDigests: []string{"registry.example/other/tool@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "registry.example/public/tool@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"},
			wantCalls:   1, wantExpected: []string{"sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}},
		{name: "the registry serves other bytes", image: pubImage, repoDigests: []string{"registry.example/public/tool@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"},
			verifierErr: errors.New("digest mismatch"), wantErr: imagemanager.ErrImagePull, wantCalls: 1, wantExpected: []string{"sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}},
		{name: "no repo digest for the repository: refused without asking", image: pubImage,
			repoDigests: []string{"registry.example/other/tool@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}, wantErr: imagemanager.ErrImagePull},
		{name: "a digest reference is checked against itself", image: digestRef, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &verifierCalls{err: tt.verifierErr}
			e := newEnv(t, true, imagemanager.WithManifestVerification(guardedpull.VerifierFunc(v.verify)))
			e.rt.Serve(digestRef, refPub)
			e.rt.RepoDigests = tt.repoDigests

			res, err := e.ensure(pod("team-b", "app"), tt.image, corev1.PullIfNotPresent)

			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, res.Message, "pull not verified")
			} else {
				require.NoError(t, err, res.Message)
			}
			require.Len(t, v.calls, tt.wantCalls)
			if tt.wantCalls > 0 {
				assert.Equal(t, tt.wantExpected, v.calls[0])
			}
		})
	}
}
