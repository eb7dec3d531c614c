package pulltest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/fakeruntime"
	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// Class is the kind of outcome a front end's caller sees.
type Class string

// The classes of outcome.
const (
	Pulled           Class = "pulled"
	Failed           Class = "failed"
	Unverified       Class = "unverified"
	Canceled         Class = "canceled"
	DeadlineExceeded Class = "deadline exceeded"
	// Other is any outcome a front end should not give.
	Other Class = "other"
)

// Outcome is what a front end's caller saw of a pull.
type Outcome struct {
	Class Class
	// Message is the human text: the event for the image manager, the
	// status message for the proxy.
	Message string
}

// Env is what a front end is built on for one case.
type Env struct {
	Runtime  *fakeruntime.Runtime
	Tracker  credtracker.Enabled
	Verifier guardedpull.Verifier
	// IfNotPresent: the front end pulls as the kubelet does for an
	// IfNotPresent container (a presence check first, then the pull);
	// else as for an Always container.
	IfNotPresent bool
}

// Pull makes a pod of namespace "team-a" pull Image with the credential
// of Secret (the image manager) or Auth (the proxy), as the front end's
// caller does, with ctx, and says what the caller saw.
type Pull func(ctx context.Context) Outcome

// FrontEnd builds a front end on env and returns how to pull through it.
type FrontEnd func(t *testing.T, env Env) Pull

// Record is what the tracker holds of Image after a pull.
type Record int

const (
	// NoRecord: no record names Image's repository.
	NoRecord Record = iota
	// Credential: Image's ID is recorded under the repository with the
	// credential that pulled it, and is not node-accessible.
	Credential
	// Unknown: Image's ID is recorded under the repository as pulled by
	// this node with no known credential: every pod verifies.
	Unknown
)

// Case is one pull and what both front ends must make of it.
type Case struct {
	Name string
	// Preloaded puts Image in the runtime before the pull, with no record.
	Preloaded bool
	// Hidden puts Image in the runtime before the pull, recorded as pulled
	// by this node with no known credential (a pull a crash interrupted),
	// so that every pod verifies, and the front end pulls it on the
	// IfNotPresent path.
	Hidden bool
	// Runtime is what the runtime's pull does.
	Runtime Behaviour
	// Lying makes the registry serve other bytes than those the runtime
	// resolved.
	Lying bool
	// Refusing makes the registry refuse every credential (401).
	Refusing bool

	Want Class
	// Says are texts the caller's message must hold.
	Says   []string
	Record Record
	// Intents is how many pull intents are left unresolved.
	Intents int
	// Free says whether a Never pod with no credential may use the image
	// afterwards (it may only when it looks preloaded).
	Free bool
	// Answered: the registry's answer for the present image stood for the
	// pull, and the runtime was not asked to pull (else it was, once).
	Answered bool
}

// Cases are the pulls both front ends must treat alike.
var Cases = []Case{
	{Name: "pulled and verified", Runtime: Store, Want: Pulled, Record: Credential},
	{Name: "refused by the registry", Runtime: Refuse, Want: Failed, Says: []string{"401 Unauthorized"}},
	{Name: "cancelled after the runtime stored the image", Runtime: StoreThenCancel, Want: Canceled, Record: Unknown},
	{Name: "deadline passed after the runtime stored the image", Runtime: StoreThenDeadline, Want: DeadlineExceeded, Record: Unknown},
	{Name: "the runtime failed after it stored the image", Runtime: StoreThenFail, Want: Failed, Says: []string{"database is locked"}, Record: Unknown},
	{Name: "cancelled before the runtime stored anything", Runtime: CancelBeforeStore, Want: Canceled},
	{Name: "cancelled pull of a preloaded image whose tag moved, which it left as it was", Preloaded: true, Lying: true, Runtime: CancelBeforeStore, Want: Canceled, Free: true},
	{Name: "an Always pull of a present image the registry serves: no runtime pull", Preloaded: true, Runtime: Refuse, Want: Pulled, Record: Credential, Answered: true},
	{Name: "a lying registry", Runtime: Store, Lying: true, Want: Unverified, Says: []string{"digest mismatch", Image}, Intents: 1},
	{Name: "an error that echoes the credential", Runtime: Echo, Want: Failed, Says: []string{"401 Unauthorized", leak.Placeholder}},
	{Name: "a hidden present image the registry serves: no runtime pull", Hidden: true, Runtime: Refuse, Want: Pulled, Record: Credential, Answered: true},
	{Name: "a hidden present image the registry serves other bytes of: pulled and verified as any", Hidden: true, Runtime: Store, Lying: true,
		Want: Unverified, Says: []string{"digest mismatch", Image}, Record: Unknown, Intents: 1},
	{Name: "a hidden present image the runtime fails to pull after the registry served other bytes", Hidden: true, Runtime: Refuse, Lying: true,
		Want: Failed, Says: []string{"401 Unauthorized"}, Record: Unknown},
	{Name: "a hidden present image the registry refuses: its answer, no runtime pull", Hidden: true, Runtime: Store, Refusing: true,
		Want: Failed, Says: []string{"401 Unauthorized", Image}, Record: Unknown, Answered: true},
	{Name: "an Always pull of a present image the registry refuses: its answer, no runtime pull", Preloaded: true, Runtime: Store, Refusing: true,
		Want: Failed, Says: []string{"401 Unauthorized", Image}, Free: true, Answered: true},
}

// Run runs every case of Cases against the front end fe builds.
func Run(t *testing.T, fe FrontEnd) {
	for _, tc := range Cases {
		t.Run(tc.Name, func(t *testing.T) {
			ctx := newEndable()
			rt := newRuntime(tc.Runtime, ctx.end)
			if tc.Preloaded {
				preload(rt)
			}
			tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: t.TempDir()}, guardedpull.Inventory(rt))
			require.NoError(t, err)
			t.Cleanup(func() { _ = tr.Close() })
			if tc.Hidden {
				preload(rt)
				imp, ok := tr.(credtracker.Importer)
				require.True(t, ok, "the tracker imports pulls")
				require.NoError(t, imp.Import([]credtracker.ImportedPull{{Image: Image, ImageRef: ID}}, nil, ""))
			}
			pull := fe(t, Env{Runtime: rt, Tracker: tr, Verifier: registry{lying: tc.Lying, refusing: tc.Refusing}, IfNotPresent: tc.Hidden})

			out := pull(ctx)

			wantPulls := 1
			if tc.Answered {
				wantPulls = 0
			}
			assert.Len(t, rt.Pulls(), wantPulls, "the runtime's pulls")

			assert.Equal(t, tc.Want, out.Class, out.Message)
			for _, s := range tc.Says {
				assert.Contains(t, out.Message, s)
			}
			basic := base64.StdEncoding.EncodeToString([]byte(User + ":" + Password))
			for _, f := range leak.Scan(map[string]string{"message": out.Message}, Password, basic) {
				assert.Fail(t, "a credential got out", "in the %s, as %q", f.Where, f.Form)
			}
			assert.Equal(t, tc.Intents, tr.Status().Intents, "unresolved intents")
			assertRecord(t, tr, tc.Record)
			id := rt.Find(Image).GetId()
			d := tr.Decide(credtracker.Request{Image: Image, PullPolicy: corev1.PullNever, ImageRef: id, Names: []string{Image}})
			assert.Equal(t, tc.Free, id != "" && d.Action == credtracker.UseImage, "a Never pod with no credential: %s %s", d.Action, d.Reason)
		})
	}
}

func assertRecord(t *testing.T, tr credtracker.Tracker, want Record) {
	t.Helper()
	var found *credtracker.RepositoryRecord
	for _, rec := range tr.Records() {
		if rr := rec.Repositories[Repo]; rr != nil {
			require.Nil(t, found, "one record names the repository")
			assert.Equal(t, ID, rec.ImageRef, "recorded under the runtime's image ID")
			found = rr
		}
	}
	if want == NoRecord {
		assert.Nil(t, found, "nothing is recorded")
		return
	}
	require.NotNil(t, found, "the pull is recorded")
	assert.False(t, found.NodeAccessible, "not node-accessible")
	assert.Empty(t, found.ServiceAccounts)
	if want == Credential {
		assert.Len(t, found.Secrets, 1, "the credential that pulled it")
	} else {
		assert.Empty(t, found.Secrets, "no credential is known to have pulled it")
	}
}

// Auth is the table's credential as the kubelet sends it over the CRI.
func Auth() *runtimeapi.AuthConfig {
	return &runtimeapi.AuthConfig{Username: User, Password: Password}
}

// Secret is the table's credential as a pull secret of namespace ns.
func Secret(ns, name string) *corev1.Secret {
	return DockerConfigSecret(ns, name, Host, User, Password)
}

// DockerConfigSecret is a kubernetes.io/dockerconfigjson secret of
// namespace ns holding user's credential for host.
func DockerConfigSecret(ns, name, host, user, password string) *corev1.Secret {
	cfg := map[string]any{"auths": map[string]any{host: map[string]string{
		"username": user, "password": password, "auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password)),
	}}}
	data, _ := json.Marshal(cfg)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name + "-uid")},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: data},
	}
}
