package imagemanager_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/internal/fakeruntime"
	"github.com/pullguard/pullguard/internal/pulltest"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

const (
	privImage = "registry.example/team-a/app:v1"
	pubImage  = "registry.example/public/tool:1"
	refPriv   = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	refPub    = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// Test passwords: none may appear in an event, a message or an error.
var passwords = map[string]string{"alice": "alice-pw-5b1e", "carol": "carol-pw-77d0", "bob": "bob-pw-0c3a"}

type env struct {
	t     *testing.T
	rt    *fakeruntime.Runtime
	tr    credtracker.Tracker
	rec   *record.FakeRecorder
	clock *clocktesting.FakeClock
	m     *imagemanager.Manager
}

func newEnv(t *testing.T, gateOn bool, opts ...imagemanager.Option) *env {
	t.Helper()
	e := &env{t: t, rt: &fakeruntime.Runtime{}, rec: record.NewFakeRecorder(1000), clock: clocktesting.NewFakeClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))}
	for u, p := range passwords {
		e.rt.AddUser(u, p)
	}
	// team-a/app: alice and carol may read it; public/tool: anyone.
	e.rt.Serve(privImage, refPriv, "alice", "carol")
	e.rt.Serve(pubImage, refPub)
	if gateOn {
		tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: t.TempDir()}, guardedpull.Inventory(e.rt), credtracker.WithClock(e.clock))
		require.NoError(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		e.tr = tr
	} else {
		e.tr = credtracker.Disabled()
	}
	base := []imagemanager.Option{imagemanager.WithClock(e.clock), imagemanager.WithLogger(ktesting.NewLogger(t, ktesting.NewConfig()))}
	m, err := imagemanager.New(e.rt, e.tr, e.rec, append(base, opts...)...)
	require.NoError(t, err)
	e.m = m
	return e
}

func pod(ns, name string, secrets ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name + "-uid")}}
	for _, s := range secrets {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return p
}

// secret makes a kubernetes.io/dockerconfigjson secret for user on
// registry.example.
func secret(ns, name, user string) *corev1.Secret {
	return registrySecret(ns, name, "registry.example", user)
}

// registrySecret makes a kubernetes.io/dockerconfigjson secret for user on
// host.
func registrySecret(ns, name, host, user string) *corev1.Secret {
	return pulltest.DockerConfigSecret(ns, name, host, user, passwords[user])
}

func (e *env) ensure(p *corev1.Pod, image string, pp corev1.PullPolicy, secrets ...*corev1.Secret) (imagemanager.Result, error) {
	return e.m.EnsureImageExists(context.Background(), imagemanager.Request{Pod: p, Image: image, PullPolicy: pp, PullSecrets: secrets})
}

type event struct{ Type, Reason, Message string }

// events drains the events recorded so far, checking none holds a password.
func (e *env) events() []event {
	e.t.Helper()
	var out []event
	for {
		select {
		case s := <-e.rec.Events:
			parts := strings.SplitN(s, " ", 3)
			require.Len(e.t, parts, 3, s)
			for _, pw := range passwords {
				require.NotContains(e.t, s, pw, "an event holds a password")
			}
			out = append(out, event{parts[0], parts[1], parts[2]})
		default:
			return out
		}
	}
}

func reasons(evs []event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Reason)
	}
	return out
}
