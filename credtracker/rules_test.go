package credtracker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
)

// hashless is a secret's credential that nobody hashed (a custom keyring
// passed through keyring.Merge, say): its Hash is zero.
func hashless(ns, name, uid string) credential.Credential {
	return credential.Credential{Registry: reg, Auth: credential.AuthConfig{Username: "u", Password: "p"},
		Source: credential.Source{Kind: credential.SourceSecret, Namespace: ns, Name: name, UID: uid}}
}

func decision(a credtracker.Action, r credtracker.Reason) credtracker.Decision {
	return credtracker.Decision{Action: a, Reason: r}
}

// TestZeroHashNeverMatches: a credential with no hash proves nothing, and
// a pull with one records no secret entry.
func TestZeroHashNeverMatches(t *testing.T) {
	tests := []struct {
		name  string
		setup func(e *env)
		pod   func(e *env) credential.Credential
	}{
		{
			name:  "pulled hashless, another namespace presents a hashless credential",
			setup: func(e *env) { e.pull(appImage, refApp, hashless("team-a", "regcred", "uid-a")) },
			pod:   func(*env) credential.Credential { return hashless("team-b", "other", "uid-b") },
		},
		{
			name:  "pulled hashless, the same secret presents it again",
			setup: func(e *env) { e.pull(appImage, refApp, hashless("team-a", "regcred", "uid-a")) },
			pod:   func(*env) credential.Credential { return hashless("team-a", "regcred", "uid-a") },
		},
		{
			name: "pulled with a hashed secret, another tenant presents a hashless credential",
			setup: func(e *env) {
				e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
			},
			pod: func(*env) credential.Credential { return hashless("team-b", "other", "uid-b") },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, credtracker.Config{})
			tt.setup(e)
			for _, pp := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullNever} {
				req := credtracker.Request{Image: appImage, ImageRef: refApp, Names: []string{appImage}, PullPolicy: pp, Credentials: credsFunc(tt.pod(e))}
				assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(req).Reason, "policy %s", pp)
			}
			for _, r := range e.tr.Records() {
				for _, rr := range r.Repositories {
					for _, s := range rr.Secrets {
						assert.False(t, s.Hash.IsZero(), "a zero hash recorded for %s/%s", s.Namespace, s.Name)
					}
				}
			}
		})
	}
}

// TestDecideAsksForCredentialsOnlyWhenTheyCanMatch: a record with no
// secret and no service account cannot be matched by anything the pod
// shows, so its credentials are not looked up (the Decider contract).
func TestDecideAsksForCredentialsOnlyWhenTheyCanMatch(t *testing.T) {
	e := newEnv(t, credtracker.Config{CredentialMaxAge: time.Hour})
	e.pull(appImage, refApp, hashless("team-a", "regcred", "uid-a")) // entry without credentials
	e.pull("registry.example/public/app:1", refOther, credential.Credential{})
	e.clock.Step(2 * time.Hour) // the node-accessible entry expires
	calls := 0
	creds := func() []credential.Credential { calls++; return nil }
	for _, req := range []credtracker.Request{
		{Image: appImage, ImageRef: refApp, Names: []string{appImage}, PullPolicy: corev1.PullIfNotPresent, Credentials: creds},
		{Image: "registry.example/public/app:1", ImageRef: refOther, Names: []string{"registry.example/public/app:1"}, PullPolicy: corev1.PullNever, Credentials: creds},
	} {
		d := e.tr.Decide(req)
		assert.NotEqual(t, credtracker.UseImage, d.Action, "%s", req.Image)
	}
	assert.Zero(t, calls)
}

// TestRotationNeverMintsTrust: a rotated secret is honoured through its
// coordinates only; its new content proves nothing to other pods until
// the registry accepts it.
func TestRotationNeverMintsTrust(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	aOld := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw-a")
	e.pull(appImage, refApp, aOld)
	// Tenant A puts tenant B's credential into A's own secret (A cannot
	// write B's secret, but nothing stops it copying B's credential).
	aHoldsB := e.secretCred(reg, "team-a", "regcred", "uid-a", "bob", "pw-b")
	bPod := e.secretCred(reg, "team-b", "regcred", "uid-b", "bob", "pw-b")
	bCopy := e.secretCred(reg, "team-c", "copy", "uid-c", "bob", "pw-b")

	assert.Equal(t, decision(credtracker.UseImage, credtracker.ReasonSecretRotated), e.tr.Decide(ifNotPresent(appImage, refApp, aHoldsB)), "A's rotated secret is honoured by its coordinates")
	for round, restart := range []bool{false, true} {
		if restart {
			e.restart()
		}
		assert.Equal(t, decision(credtracker.Pull, credtracker.ReasonNoMatch), e.tr.Decide(ifNotPresent(appImage, refApp, bPod)), "round %d: B's pod must go to the registry", round)
		assert.Equal(t, decision(credtracker.Pull, credtracker.ReasonNoMatch), e.tr.Decide(ifNotPresent(appImage, refApp, bCopy)), "round %d: a copy of the rotated content elsewhere", round)
		assert.Equal(t, decision(credtracker.UseImage, credtracker.ReasonSecretRotated), e.tr.Decide(ifNotPresent(appImage, refApp, aHoldsB)), "round %d", round)
	}
	// Nothing was written: the entry still holds the hash the registry accepted.
	recs := e.tr.Records()
	require.Len(t, recs, 1)
	secrets := recs[0].Repositories["registry.example/team-a/app"].Secrets
	require.Len(t, secrets, 1)
	assert.Equal(t, aOld.Hash, secrets[0].Hash)
	assert.Equal(t, epoch, secrets[0].Verified)

	// Once the registry accepts the new content (a pull with it), it counts.
	e.pull(appImage, refApp, aHoldsB)
	assert.Equal(t, credtracker.ReasonCredentialMatch, e.tr.Decide(ifNotPresent(appImage, refApp, bPod)).Reason)
}

// TestHashMatchRemembersCoordinates: a secret admitted because its content
// matched a registry-accepted hash is remembered by its coordinates, bound
// to that hash, so that its later rotation is honoured (as the kubelet
// does); remembering it renews nothing.
func TestHashMatchRemembersCoordinates(t *testing.T) {
	e := newEnv(t, credtracker.Config{CredentialMaxAge: time.Hour})
	pulled := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
	e.pull(appImage, refApp, pulled)
	e.clock.Step(10 * time.Minute)
	sameContent := e.secretCred(reg, "team-a", "second", "uid-2", "alice", "pw")
	assert.Equal(t, credtracker.ReasonCredentialMatch, e.tr.Decide(ifNotPresent(appImage, refApp, sameContent)).Reason)

	e.restart()
	rotated := e.secretCred(reg, "team-a", "second", "uid-2", "alice", "pw-rotated")
	assert.Equal(t, credtracker.ReasonSecretRotated, e.tr.Decide(ifNotPresent(appImage, refApp, rotated)).Reason)
	recreated := e.secretCred(reg, "team-a", "second", "uid-new", "alice", "pw-rotated")
	assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(ifNotPresent(appImage, refApp, recreated)).Reason, "a recreated secret (new uid) is another secret")
	other := e.secretCred(reg, "team-b", "regcred", "uid-b", "alice", "pw-rotated")
	assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(ifNotPresent(appImage, refApp, other)).Reason, "the rotated content proves nothing elsewhere")

	recs := e.tr.Records()
	require.Len(t, recs, 1)
	secrets := recs[0].Repositories["registry.example/team-a/app"].Secrets
	require.Len(t, secrets, 2)
	assert.Equal(t, credtracker.SecretEntry{Namespace: "team-a", Name: "second", UID: "uid-2", Hash: pulled.Hash, Verified: epoch}, secrets[1], "bound to the accepted hash and to when the registry accepted it")

	e.clock.Step(51 * time.Minute)
	assert.Equal(t, credtracker.ReasonExpired, e.tr.Decide(ifNotPresent(appImage, refApp, rotated)).Reason, "the remembered coordinates expire with the registry's acceptance")
}

// TestNoWindowForImageIDs: while a pull is in flight, a pod that names a
// present image by its ID is not admitted: the image may be the one being
// pulled, not yet recorded.
func TestNoWindowForImageIDs(t *testing.T) {
	const private = "registry.example/team-a/private:v1"
	for _, names := range [][]string{nil, {private}, {"registry.example/public/base:1"}} {
		e := newEnv(t, credtracker.Config{})
		byID := func(pp corev1.PullPolicy) credtracker.Request {
			return credtracker.Request{Image: refApp, ImageRef: refApp, Names: names, PullPolicy: pp}
		}
		require.NoError(t, e.tr.RecordPullIntent(private))
		// The window: the runtime has the image (under its new name or
		// not yet), the tracker has no record of it.
		assert.Equal(t, decision(credtracker.Pull, credtracker.ReasonPullInFlight), e.tr.Decide(byID(corev1.PullIfNotPresent)), "names %v", names)
		assert.Equal(t, decision(credtracker.FailNeverPull, credtracker.ReasonPullInFlight), e.tr.Decide(byID(corev1.PullNever)), "names %v", names)

		require.NoError(t, e.tr.RecordImagePulled(private, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")))
		assert.Equal(t, decision(credtracker.FailNeverPull, credtracker.ReasonUnlistedName), e.tr.Decide(byID(corev1.PullNever)), "names %v", names)
	}

	// A failed pull leaves a preloaded image reachable by its ID again.
	e := newEnv(t, credtracker.Config{})
	require.NoError(t, e.tr.RecordPullIntent(private))
	req := credtracker.Request{Image: refApp, ImageRef: refApp, PullPolicy: corev1.PullNever}
	assert.Equal(t, credtracker.ReasonPullInFlight, e.tr.Decide(req).Reason)
	require.NoError(t, e.tr.RecordImagePullFailed(private))
	assert.Equal(t, decision(credtracker.UseImage, credtracker.ReasonPreloaded), e.tr.Decide(req))
}
