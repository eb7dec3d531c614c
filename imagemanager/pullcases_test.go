package imagemanager_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/internal/pulltest"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// TestPullCases runs the pull cases the CRI proxy passes too
// (internal/pulltest) against EnsureImageExists, for an Always container
// of a pod whose pull secret holds the table's credential (IfNotPresent for
// the cases that say so).
func TestPullCases(t *testing.T) {
	pulltest.Run(t, func(t *testing.T, env pulltest.Env) pulltest.Pull {
		clock := clocktesting.NewFakeClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
		m, err := imagemanager.New(env.Runtime, env.Tracker, record.NewFakeRecorder(100), imagemanager.WithManifestVerification(env.Verifier),
			imagemanager.WithClock(clock), imagemanager.WithLogger(ktesting.NewLogger(t, ktesting.NewConfig())))
		require.NoError(t, err)
		policy := corev1.PullAlways
		if env.IfNotPresent {
			policy = corev1.PullIfNotPresent
		}
		return func(ctx context.Context) pulltest.Outcome {
			res, err := m.EnsureImageExists(ctx, imagemanager.Request{Pod: pod("team-a", "app", "regcred"), Image: pulltest.Image,
				PullPolicy: policy, PullSecrets: []*corev1.Secret{pulltest.Secret("team-a", "regcred")}})
			return pulltest.Outcome{Class: pullClass(err, res.Message), Message: res.Message}
		}
	})
}

// pullClass tells the outcomes apart: EnsureImageExists fails every pull
// with ErrImagePull and says why in the message.
func pullClass(err error, msg string) pulltest.Class {
	switch {
	case err == nil:
		return pulltest.Pulled
	case !errors.Is(err, imagemanager.ErrImagePull):
		return pulltest.Other
	case strings.Contains(msg, guardedpull.ErrUnverified.Error()):
		return pulltest.Unverified
	case strings.Contains(msg, context.Canceled.Error()):
		return pulltest.Canceled
	case strings.Contains(msg, context.DeadlineExceeded.Error()):
		return pulltest.DeadlineExceeded
	}
	return pulltest.Failed
}

// TestRemoveCases runs the removal cases the CRI proxy passes too
// (internal/pulltest) against RemoveImage and PruneRecords, on the
// tracker's clock (a record written after a removal was asked is kept).
func TestRemoveCases(t *testing.T) {
	pulltest.RunRemove(t, func(t *testing.T, env pulltest.Env) pulltest.Remover {
		m, err := imagemanager.New(env.Runtime, env.Tracker, record.NewFakeRecorder(100), imagemanager.WithLogger(ktesting.NewLogger(t, ktesting.NewConfig())))
		require.NoError(t, err)
		return pulltest.Remover{Remove: m.RemoveImage, Prune: m.PruneRecords}
	})
}
