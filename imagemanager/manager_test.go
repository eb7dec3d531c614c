package imagemanager_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/internal/fakeruntime"
	"github.com/pullguard/pullguard/pkg/keyring"
)

const neverMsg = `Container image "registry.example/team-a/app:v1" is not present with pull policy of Never`

func TestEnsureImageExists(t *testing.T) {
	secretA := secret("team-a", "regcred", "alice")
	secretB := secret("team-b", "regcred", "bob")
	secretC := secret("team-c", "regcred", "carol")
	tests := []struct {
		name       string
		gateOn     bool
		setup      func(e *env) // before the request under test
		pod        *corev1.Pod
		image      string
		policy     corev1.PullPolicy
		secrets    []*corev1.Secret
		wantErr    error
		wantRef    string
		wantPulled bool
		wantPulls  []fakeruntime.Pull // PullImage calls made by the request under test
		wantEvents []event            // events of the request under test, in order
	}{
		{
			name: "absent, IfNotPresent: pull with the pod's secret", gateOn: true,
			pod: pod("team-a", "p1", "regcred"), image: privImage, policy: corev1.PullIfNotPresent, secrets: []*corev1.Secret{secretA},
			wantRef: refPriv, wantPulled: true, wantPulls: []fakeruntime.Pull{{Image: privImage, User: "alice"}},
			wantEvents: []event{{"Normal", "Pulling", `Pulling image "registry.example/team-a/app:v1"`}, {"Normal", "Pulled", "Successfully pulled image"}},
		},
		{
			name: "absent, Never", gateOn: true,
			pod: pod("team-a", "p1", "regcred"), image: privImage, policy: corev1.PullNever, secrets: []*corev1.Secret{secretA},
			wantErr: imagemanager.ErrImageNeverPull, wantEvents: []event{{"Warning", "ErrImageNeverPull", neverMsg}},
		},
		{
			name: "tenant A's second pod starts with no registry contact", gateOn: true,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secretA) },
			pod:   pod("team-a", "p2", "regcred"), image: privImage, policy: corev1.PullIfNotPresent, secrets: []*corev1.Secret{secretA},
			wantRef:    refPriv,
			wantEvents: []event{{"Normal", "Pulled", `Container image "registry.example/team-a/app:v1" already present on machine and can be accessed by the pod`}},
		},
		{
			name: "tenant A's pod with Never also uses its image", gateOn: true,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secretA) },
			pod:   pod("team-a", "p2", "regcred"), image: privImage, policy: corev1.PullNever, secrets: []*corev1.Secret{secretA},
			wantRef:    refPriv,
			wantEvents: []event{{"Normal", "Pulled", "already present on machine and can be accessed by the pod"}},
		},
		{
			name: "tenant B without credentials is refused by the registry", gateOn: true,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secretA) },
			pod:   pod("team-b", "p1"), image: privImage, policy: corev1.PullIfNotPresent,
			wantErr: imagemanager.ErrImagePull, wantPulled: true, wantPulls: []fakeruntime.Pull{{Image: privImage, User: ""}},
			wantEvents: []event{{"Normal", "Pulling", "Pulling image"}, {"Warning", "Failed", `Failed to pull image "registry.example/team-a/app:v1": failed to pull and unpack image`}},
		},
		{
			name: "tenant B with its own secret for another repository is refused", gateOn: true,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secretA) },
			pod:   pod("team-b", "p1", "regcred"), image: privImage, policy: corev1.PullIfNotPresent, secrets: []*corev1.Secret{secretB},
			wantErr: imagemanager.ErrImagePull, wantPulled: true, wantPulls: []fakeruntime.Pull{{Image: privImage, User: "bob"}},
			wantEvents: []event{{"Normal", "Pulling", ""}, {"Warning", "Failed", "401 Unauthorized"}},
		},
		{
			name: "tenant B with Never gets the absent image's message", gateOn: true,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secretA) },
			pod:   pod("team-b", "p1"), image: privImage, policy: corev1.PullNever,
			wantErr: imagemanager.ErrImageNeverPull, wantEvents: []event{{"Warning", "ErrImageNeverPull", neverMsg}},
		},
		{
			name: "tenant C with its own valid credentials is verified by one pull", gateOn: true,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secretA) },
			pod:   pod("team-c", "p1", "regcred"), image: privImage, policy: corev1.PullIfNotPresent, secrets: []*corev1.Secret{secretC},
			wantRef: refPriv, wantPulled: true, wantPulls: []fakeruntime.Pull{{Image: privImage, User: "carol"}},
			wantEvents: []event{{"Normal", "Pulling", ""}, {"Normal", "Pulled", "Successfully pulled image"}},
		},
		{
			name: "gate off: tenant B gets the image (the stock kubelet)", gateOn: false,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secretA) },
			pod:   pod("team-b", "p1"), image: privImage, policy: corev1.PullIfNotPresent,
			wantRef:    refPriv,
			wantEvents: []event{{"Normal", "Pulled", `Container image "registry.example/team-a/app:v1" already present on machine`}},
		},
		{
			name: "gate off: Never uses a present image", gateOn: false,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secretA) },
			pod:   pod("team-b", "p1"), image: privImage, policy: corev1.PullNever,
			wantRef: refPriv, wantEvents: []event{{"Normal", "Pulled", "already present on machine"}},
		},
		{
			name: "gate off: Never fails for an absent image", gateOn: false,
			pod: pod("team-b", "p1"), image: privImage, policy: corev1.PullNever,
			wantErr: imagemanager.ErrImageNeverPull, wantEvents: []event{{"Warning", "ErrImageNeverPull", neverMsg}},
		},
		{
			name: "Always pulls even for the pod that pulled it", gateOn: true,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secretA) },
			pod:   pod("team-a", "p2", "regcred"), image: privImage, policy: corev1.PullAlways, secrets: []*corev1.Secret{secretA},
			wantRef: refPriv, wantPulled: true, wantPulls: []fakeruntime.Pull{{Image: privImage, User: "alice"}},
			wantEvents: []event{{"Normal", "Pulling", ""}, {"Normal", "Pulled", "Successfully pulled image"}},
		},
		{
			name: "gate off: Always pulls", gateOn: false,
			pod: pod("team-a", "p2", "regcred"), image: privImage, policy: corev1.PullAlways, secrets: []*corev1.Secret{secretA},
			wantRef: refPriv, wantPulled: true, wantPulls: []fakeruntime.Pull{{Image: privImage, User: "alice"}},
			wantEvents: []event{{"Normal", "Pulling", ""}, {"Normal", "Pulled", "Successfully pulled image"}},
		},
		{
			name: "a preloaded image is free under the default policy", gateOn: true,
			setup: func(e *env) { e.rt.Add(&runtimeapi.Image{Id: refPriv, RepoTags: []string{privImage}, Size: 1234}) },
			pod:   pod("team-b", "p1"), image: privImage, policy: corev1.PullNever,
			wantRef: refPriv, wantEvents: []event{{"Normal", "Pulled", "already present on machine and can be accessed by the pod"}},
		},
		{
			name: "anonymous pull of a public image makes it node-accessible", gateOn: true,
			setup: func(e *env) { e.ensure(pod("team-a", "p1"), pubImage, corev1.PullIfNotPresent) },
			pod:   pod("team-b", "p1"), image: pubImage, policy: corev1.PullNever,
			wantRef: refPub, wantEvents: []event{{"Normal", "Pulled", "already present"}},
		},
		{
			name: "credentials are tried in order until one succeeds", gateOn: true,
			pod: pod("team-a", "p1", "bobs", "alices"), image: privImage, policy: corev1.PullIfNotPresent,
			secrets: []*corev1.Secret{secret("team-a", "bobs", "bob"), secret("team-a", "alices", "alice")},
			wantRef: refPriv, wantPulled: true, wantPulls: []fakeruntime.Pull{{Image: privImage, User: "bob"}, {Image: privImage, User: "alice"}},
			wantEvents: []event{{"Normal", "Pulling", ""}, {"Normal", "Pulled", "Successfully pulled image"}},
		},
		{
			name: "invalid image name", gateOn: true,
			pod: pod("team-a", "p1"), image: "registry.example/Team/App:v1", policy: corev1.PullIfNotPresent,
			wantErr: imagemanager.ErrInvalidImageName, wantEvents: []event{{"Warning", "InspectFailed", `Failed to apply default image tag "registry.example/Team/App:v1"`}},
		},
		{
			name: "the runtime cannot inspect", gateOn: true,
			setup: func(e *env) { e.rt.FailStatus(assert.AnError) },
			pod:   pod("team-a", "p1"), image: privImage, policy: corev1.PullIfNotPresent,
			wantErr: imagemanager.ErrImageInspect, wantEvents: []event{{"Warning", "InspectFailed", `Failed to inspect image "registry.example/team-a/app:v1"`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.gateOn)
			if tt.setup != nil {
				tt.setup(e)
			}
			e.events()
			before := len(e.rt.Pulls())

			res, err := e.ensure(tt.pod, tt.image, tt.policy, tt.secrets...)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err, res.Message)
			}
			assert.Equal(t, tt.wantRef, res.ImageRef)
			assert.Equal(t, tt.wantPulled, res.Pulled)
			gotPulls := e.rt.Pulls()[before:]
			if len(gotPulls) == 0 {
				gotPulls = nil
			}
			assert.Equal(t, tt.wantPulls, gotPulls)
			evs := e.events()
			require.Len(t, evs, len(tt.wantEvents), "events: %v", evs)
			for i, want := range tt.wantEvents {
				assert.Equal(t, want.Type, evs[i].Type)
				assert.Equal(t, want.Reason, evs[i].Reason)
				assert.Contains(t, evs[i].Message, want.Message)
			}
			assert.Equal(t, evs[len(evs)-1].Message, res.Message, "the result carries the last event's message")
			for _, pw := range passwords {
				assert.NotContains(t, res.Message, pw)
			}
		})
	}
}

func TestRecordedCredentialIsTheOneThatSucceeded(t *testing.T) {
	e := newEnv(t, true)
	_, err := e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secret("team-a", "bobs", "bob"), secret("team-a", "alices", "alice"))
	require.NoError(t, err)
	recs := e.tr.Records()
	require.Len(t, recs, 1)
	rr := recs[0].Repositories["registry.example/team-a/app"]
	require.NotNil(t, rr)
	require.Len(t, rr.Secrets, 1)
	assert.Equal(t, "alices", rr.Secrets[0].Name)
	// A pod holding only bob's secret is still refused.
	_, err = e.ensure(pod("team-a", "p2"), privImage, corev1.PullNever, secret("team-a", "bobs", "bob"))
	assert.ErrorIs(t, err, imagemanager.ErrImageNeverPull)
}

func TestNodeCredentialsMakeTheImageNodeAccessible(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"auths":{"registry.example":{"username":"alice","password":"` + passwords["alice"] + `"}}}`
	path := dir + "/config.json"
	require.NoError(t, writeFile(path, cfg))
	e := newEnv(t, true)
	node, err := keyring.NodeKeyring(e.tr.(credtracker.Enabled).Hasher(), []string{path})
	require.NoError(t, err)
	m, err := imagemanager.New(e.rt, e.tr, e.rec, imagemanager.WithNodeKeyring(node), imagemanager.WithClock(e.clock))
	require.NoError(t, err)
	e.m = m

	_, err = e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent)
	require.NoError(t, err)
	assert.Equal(t, []fakeruntime.Pull{{Image: privImage, User: "alice"}}, e.rt.Pulls())
	rr := e.tr.Records()[0].Repositories["registry.example/team-a/app"]
	assert.True(t, rr.NodeAccessible, "node credentials are every pod's")
	_, err = e.ensure(pod("team-b", "p1"), privImage, corev1.PullNever)
	assert.NoError(t, err)
}

func TestMalformedSecretIsSkippedAndReported(t *testing.T) {
	e := newEnv(t, true)
	bad := secret("team-a", "broken", "alice")
	bad.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths": {"registry.example": {"auth": "not base64 ` + passwords["alice"] + `"}}}`)
	res, err := e.ensure(pod("team-a", "p1", "broken", "regcred"), privImage, corev1.PullIfNotPresent, bad, secret("team-a", "regcred", "alice"))
	require.NoError(t, err, res.Message)
	evs := e.events()
	require.NotEmpty(t, evs)
	assert.Equal(t, "FailedToRetrieveImagePullSecret", evs[0].Reason)
	assert.Contains(t, evs[0].Message, `"team-a/broken"`)
	assert.Equal(t, []string{"FailedToRetrieveImagePullSecret", "Pulling", "Pulled"}, reasons(evs))
}

// TestIntentResolvedOnFailureAndCancellation: the intent is durable while
// the pull runs and resolved after it fails or its pod gives up. A pull
// cancelled after the runtime stored the image records it as pulled with
// no known credential: it must not look preloaded to the next pod (this
// test used to assert that nothing was recorded). internal/pulltest has
// the same cases for both front ends.
func TestIntentResolvedOnFailureAndCancellation(t *testing.T) {
	e := newEnv(t, true)
	_, err := e.ensure(pod("team-b", "p1"), privImage, corev1.PullIfNotPresent)
	require.ErrorIs(t, err, imagemanager.ErrImagePull)
	assert.Equal(t, 0, e.tr.Status().Intents)
	assert.Empty(t, e.tr.Records())

	tests := []struct {
		name       string
		storeFirst bool
		wantRecord bool
	}{
		{name: "cancelled before the runtime stored the image"},
		{name: "cancelled after the runtime stored the image", storeFirst: true, wantRecord: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, true)
			started := make(chan string, 1)
			e.rt.Hold, e.rt.StoreFirst = held(started, make(chan struct{})), tt.storeFirst
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() {
				_, err := e.m.EnsureImageExists(ctx, imagemanager.Request{Pod: pod("team-a", "p1"), Image: privImage, PullPolicy: corev1.PullIfNotPresent, PullSecrets: []*corev1.Secret{secret("team-a", "regcred", "alice")}})
				done <- err
			}()
			<-started
			assert.Equal(t, 1, e.tr.Status().Intents, "the intent is durable while the pull runs")
			cancel()
			assert.ErrorIs(t, <-done, imagemanager.ErrImagePull)
			assert.Equal(t, 0, e.tr.Status().Intents)
			if !tt.wantRecord {
				assert.Empty(t, e.tr.Records())
				return
			}
			recs := e.tr.Records()
			require.Len(t, recs, 1)
			rr := recs[0].Repositories["registry.example/team-a/app"]
			require.NotNil(t, rr)
			assert.False(t, rr.NodeAccessible)
			assert.Empty(t, rr.Secrets, "no credential is known to have pulled it")
			_, err := e.ensure(pod("team-b", "p2"), privImage, corev1.PullNever)
			assert.ErrorIs(t, err, imagemanager.ErrImageNeverPull, "the image does not look preloaded")
		})
	}
}

func TestBackOff(t *testing.T) {
	e := newEnv(t, true)
	p := pod("team-b", "p1")
	_, err := e.ensure(p, privImage, corev1.PullIfNotPresent)
	require.ErrorIs(t, err, imagemanager.ErrImagePull)
	e.events()

	res, err := e.ensure(p, privImage, corev1.PullIfNotPresent)
	require.ErrorIs(t, err, imagemanager.ErrImagePullBackOff)
	// The kubelet's event is the back-off alone; the waiting message adds
	// the previous failure.
	assert.Equal(t, []event{{"Normal", "BackOff", `Back-off pulling image "registry.example/team-a/app:v1"`}}, e.events())
	assert.True(t, strings.HasPrefix(res.Message, `Back-off pulling image "registry.example/team-a/app:v1": ErrImagePull: `), res.Message)
	assert.Len(t, e.rt.Pulls(), 1, "no registry contact while backing off")

	// Another pod is not held back by this one's failures.
	_, err = e.ensure(pod("team-b", "p2"), privImage, corev1.PullIfNotPresent)
	require.ErrorIs(t, err, imagemanager.ErrImagePull)

	e.clock.Step(imagemanager.DefaultBackOffInitial + time.Second)
	_, err = e.ensure(p, privImage, corev1.PullIfNotPresent)
	require.ErrorIs(t, err, imagemanager.ErrImagePull, "after the back-off it tries again")
	// The back-off doubled: 10s later it is still backing off.
	e.clock.Step(imagemanager.DefaultBackOffInitial + time.Second)
	_, err = e.ensure(p, privImage, corev1.PullIfNotPresent)
	require.ErrorIs(t, err, imagemanager.ErrImagePullBackOff)
}

func TestRegistryQPS(t *testing.T) {
	e := newEnv(t, true, imagemanager.WithRegistryQPS(1, 1))
	_, err := e.ensure(pod("team-a", "p1"), pubImage, corev1.PullAlways)
	require.NoError(t, err)
	res, err := e.ensure(pod("team-a", "p2"), pubImage, corev1.PullAlways)
	require.ErrorIs(t, err, imagemanager.ErrImagePull)
	assert.Contains(t, res.Message, "pull QPS exceeded")
	assert.False(t, res.Pulled)
	e.clock.Step(time.Second)
	_, err = e.ensure(pod("team-a", "p3"), pubImage, corev1.PullAlways)
	require.NoError(t, err)
	assert.Len(t, e.rt.Pulls(), 2)
}

func TestParallelPullLimits(t *testing.T) {
	tests := []struct {
		name    string
		opts    []imagemanager.Option
		pulls   int
		wantMax int
	}{
		{name: "serialized (the default)", pulls: 4, wantMax: 1},
		{name: "parallel, at most 3", opts: []imagemanager.Option{imagemanager.WithSerializedPulls(false), imagemanager.WithMaxParallelImagePulls(3)}, pulls: 6, wantMax: 3},
		{name: "parallel, unbounded", opts: []imagemanager.Option{imagemanager.WithSerializedPulls(false)}, pulls: 5, wantMax: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, true, append(tt.opts, imagemanager.WithRegistryQPS(0, 0))...)
			started, release := make(chan string, tt.pulls), make(chan struct{})
			e.rt.Hold = held(started, release)
			done := make(chan error, tt.pulls)
			for i := range tt.pulls {
				go func() {
					_, err := e.ensure(pod("ns", "p"+string(rune('a'+i))), pubImage, corev1.PullAlways)
					done <- err
				}()
			}
			// Wait until wantMax pulls run at once, then let them finish
			// one by one: each release admits at most one more.
			for range tt.wantMax {
				<-started
			}
			for range tt.pulls - tt.wantMax {
				release <- struct{}{}
				<-started
			}
			for range tt.wantMax {
				release <- struct{}{}
			}
			for range tt.pulls {
				require.NoError(t, <-done)
			}
			assert.Equal(t, tt.wantMax, e.rt.MaxInFlight())
		})
	}
}

func TestRemoveImagePrunesRecords(t *testing.T) {
	e := newEnv(t, true)
	_, err := e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secret("team-a", "regcred", "alice"))
	require.NoError(t, err)
	_, err = e.ensure(pod("team-a", "p1"), pubImage, corev1.PullIfNotPresent)
	require.NoError(t, err)
	require.Len(t, e.tr.Records(), 2)
	e.clock.Step(time.Second)

	require.NoError(t, e.m.RemoveImage(context.Background(), refPriv))
	recs := e.tr.Records()
	require.Len(t, recs, 1)
	assert.Equal(t, refPub, recs[0].ImageRef)
}

func TestDefaultTag(t *testing.T) {
	e := newEnv(t, true)
	e.rt.Serve("registry.example/public/tool:latest", refPub)
	res, err := e.ensure(pod("a", "p"), "registry.example/public/tool", corev1.PullAlways)
	require.NoError(t, err)
	assert.True(t, strings.Contains(res.Message, `"registry.example/public/tool:latest"`), res.Message)
}

// repoDigestRuntime returns a repo digest from PullImage, as some runtimes
// do, while ImageStatus reports the image ID.
type repoDigestRuntime struct{ *fakeruntime.Runtime }

func (r repoDigestRuntime) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sb *runtimeapi.PodSandboxConfig) (string, error) {
	if _, err := r.Runtime.PullImage(ctx, spec, auth, sb); err != nil {
		return "", err
	}
	return "registry.example/team-a/app@sha256:9999999999999999999999999999999999999999999999999999999999999999", nil
}

func TestRecordKeyedByImageID(t *testing.T) {
	e := newEnv(t, true)
	m, err := imagemanager.New(repoDigestRuntime{e.rt}, e.tr, e.rec, imagemanager.WithClock(e.clock))
	require.NoError(t, err)
	e.m = m
	_, err = e.ensure(pod("team-a", "p1"), privImage, corev1.PullIfNotPresent, secret("team-a", "regcred", "alice"))
	require.NoError(t, err)
	require.Len(t, e.tr.Records(), 1)
	assert.Equal(t, refPriv, e.tr.Records()[0].ImageRef)
	_, err = e.ensure(pod("team-b", "p1"), privImage, corev1.PullNever)
	assert.ErrorIs(t, err, imagemanager.ErrImageNeverPull, "the record is found: the image is protected")
}

// held is a pull that waits, once the registry answered: it says so on
// started, then waits for a token on release or for its caller to give up.
func held(started chan<- string, release <-chan struct{}) func(context.Context, *runtimeapi.ImageSpec, *runtimeapi.AuthConfig) error {
	return func(ctx context.Context, spec *runtimeapi.ImageSpec, _ *runtimeapi.AuthConfig) error {
		started <- spec.GetImage()
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
