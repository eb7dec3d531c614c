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

const (
	reg      = "registry.example"
	appImage = "registry.example/team-a/app:v1"
)

var policies = []credtracker.Policy{credtracker.NeverVerify, credtracker.NeverVerifyPreloadedImages, credtracker.NeverVerifyAllowlistedImages, credtracker.AlwaysVerify}

// outcome is the IfNotPresent decision; the Never decision is the same
// with Pull replaced by FailNeverPull (design rule 5: the same outcome for
// an absent image and a refused one).
type outcome struct {
	action credtracker.Action
	reason credtracker.Reason
}

var (
	use = func(r credtracker.Reason) outcome { return outcome{credtracker.UseImage, r} }
	pul = func(r credtracker.Reason) outcome { return outcome{credtracker.Pull, r} }
)

func TestDecide(t *testing.T) {
	secretA := func(e *env) credential.Credential {
		return e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw-a")
	}
	tests := []struct {
		name  string
		image string
		ref   string // "" = absent
		setup func(e *env)
		creds func(e *env) []credential.Credential
		want  map[credtracker.Policy]outcome
		// names are the image's names in the runtime; nil means [image].
		names []string
		// mutates: the decision itself changes the record (a rotation), so
		// each pull policy gets a fresh store.
		mutates bool
	}{
		{
			name: "absent image", image: appImage, ref: "",
			want: all(pul(credtracker.ReasonAbsent)),
		},
		{
			name: "preloaded image, no credentials", image: appImage, ref: refApp,
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   use(credtracker.ReasonPreloaded),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonNotAllowlisted),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonAlwaysVerify),
			},
		},
		{
			name: "preloaded image on the allowlist", image: "registry.example/public/tool:1", ref: refApp,
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   use(credtracker.ReasonPreloaded),
				credtracker.NeverVerifyAllowlistedImages: use(credtracker.ReasonAllowlisted),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonAlwaysVerify),
			},
		},
		{
			name: "allowlisted name pulled with a secret still needs credentials", image: "registry.example/public/tool:1", ref: refApp,
			setup: func(e *env) { e.pull("registry.example/public/tool:1", refApp, secretA(e)) },
			want:  verifiedByNode(pul(credtracker.ReasonNoMatch)),
		},
		{
			name: "pulled with a secret, pod has no credentials", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			want:  verifiedByNode(pul(credtracker.ReasonNoMatch)),
		},
		{
			name: "pulled with a secret, pod presents the same credential", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			creds: func(e *env) []credential.Credential { return []credential.Credential{secretA(e)} },
			want:  verifiedByNode(use(credtracker.ReasonCredentialMatch)),
		},
		{
			name: "same credential content in another namespace's secret", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			creds: func(e *env) []credential.Credential {
				return []credential.Credential{e.secretCred(reg, "team-c", "copy", "uid-c", "alice", "pw-a")}
			},
			want: verifiedByNode(use(credtracker.ReasonCredentialMatch)),
		},
		{
			name: "same image under another tag and by digest", image: "registry.example/team-a/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			creds: func(e *env) []credential.Credential { return []credential.Credential{secretA(e)} },
			want:  verifiedByNode(use(credtracker.ReasonCredentialMatch)),
		},
		{
			name: "pulled with a secret, pod presents another tenant's credential", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			creds: func(e *env) []credential.Credential {
				return []credential.Credential{e.secretCred(reg, "team-b", "regcred", "uid-b", "bob", "pw-b")}
			},
			want: verifiedByNode(pul(credtracker.ReasonNoMatch)),
		},
		{
			name: "same credential for another registry does not match", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			creds: func(e *env) []credential.Credential {
				return []credential.Credential{e.secretCred("other.example", "team-a", "regcred2", "uid-a2", "alice", "pw-a")}
			},
			want: verifiedByNode(pul(credtracker.ReasonNoMatch)),
		},
		{
			name: "rotated secret: same namespace, name and uid, new content", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			creds: func(e *env) []credential.Credential {
				return []credential.Credential{e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "rotated")}
			},
			want:    verifiedByNode(use(credtracker.ReasonSecretRotated)),
			mutates: true,
		},
		{
			name: "recreated secret: same name, new uid, new content", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			creds: func(e *env) []credential.Credential {
				return []credential.Credential{e.secretCred(reg, "team-a", "regcred", "uid-new", "alice", "rotated")}
			},
			want: verifiedByNode(pul(credtracker.ReasonNoMatch)),
		},
		{
			name: "pulled anonymously: node-accessible", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, credential.Credential{}) },
			want:  verifiedByNode(use(credtracker.ReasonNodeAccessible)),
		},
		{
			name: "pulled with node credentials: node-accessible", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, nodeCred(e.tr.Hasher(), reg)) },
			want:  verifiedByNode(use(credtracker.ReasonNodeAccessible)),
		},
		{
			name: "node-accessible after a secret pull wipes the secret list", image: appImage, ref: refApp,
			setup: func(e *env) {
				e.pull(appImage, refApp, secretA(e))
				e.pull(appImage, refApp, credential.Credential{})
			},
			want: verifiedByNode(use(credtracker.ReasonNodeAccessible)),
		},
		{
			name: "pulled by a service account's plugin, same service account", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, e.saCred(reg, "team-a", "builder", "sa-uid", "tok-1")) },
			creds: func(e *env) []credential.Credential {
				return []credential.Credential{e.saCred(reg, "team-a", "builder", "sa-uid", "tok-2")}
			},
			want: verifiedByNode(use(credtracker.ReasonServiceAccount)),
		},
		{
			name: "pulled by a service account's plugin, another service account", image: appImage, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, e.saCred(reg, "team-a", "builder", "sa-uid", "tok-1")) },
			creds: func(e *env) []credential.Credential {
				return []credential.Credential{e.saCred(reg, "team-b", "builder", "sa-uid-b", "tok-3")}
			},
			want: verifiedByNode(pul(credtracker.ReasonNoMatch)),
		},
		{
			name: "a bare image ID reaches an image pulled with a secret", image: refApp, ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			names: []string{appImage},
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   pul(credtracker.ReasonUnlistedName),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonUnlistedName),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonUnlistedName),
			},
		},
		{
			name: "a name the runtime does not list reaches an image pulled with a secret", image: "registry.example/public/alias:1", ref: refApp,
			setup: func(e *env) { e.pull(appImage, refApp, secretA(e)) },
			names: []string{appImage},
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   pul(credtracker.ReasonUnlistedName),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonUnlistedName),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonUnlistedName),
			},
		},
		{
			// containerd finds an image by a unique prefix of its ID
			// ("3f2a9c"), which reads as docker.io/library/3f2a9c: an
			// allowlisted name the image does not have.
			name: "an allowlisted name the preloaded image does not have", image: "registry.example/public/3f2a9c", ref: refApp,
			names: []string{appImage},
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   use(credtracker.ReasonPreloaded),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonUnlistedName),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonAlwaysVerify),
			},
		},
		{
			name: "a bare image ID of a preloaded image is free", image: refApp, ref: refApp,
			names: []string{appImage},
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   use(credtracker.ReasonPreloaded),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonNotAllowlisted),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonAlwaysVerify),
			},
		},
		{
			name: "kubernetes#138175: same digest pulled with a secret under another name", image: "registry.example/public/base:1", ref: refBase,
			setup: func(e *env) { e.pull("registry.example/team-a/base:1", refBase, secretA(e)) },
			names: []string{"registry.example/team-a/base:1", "registry.example/public/base:1"},
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   use(credtracker.ReasonPreloaded),
				credtracker.NeverVerifyAllowlistedImages: use(credtracker.ReasonAllowlisted),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonAlwaysVerify),
			},
		},
		{
			name: "a pull of this image is in flight", image: appImage, ref: refApp,
			setup: func(e *env) { require.NoError(e.t, e.tr.RecordPullIntent(appImage)) },
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   pul(credtracker.ReasonPullInFlight),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonPullInFlight),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonPullInFlight),
			},
		},
		{
			// The kubelet counts pull intents per image
			// (getIntentCounterForImage): team/tool:v2 in flight leaves
			// the preloaded team/tool:v1 free.
			name: "a pull of another tag of the repository is in flight", image: appImage, ref: refApp,
			setup: func(e *env) { require.NoError(e.t, e.tr.RecordPullIntent("registry.example/team-a/app:v2")) },
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   use(credtracker.ReasonPreloaded),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonNotAllowlisted),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonAlwaysVerify),
			},
		},
		{
			name: "a pull of the image's default tag is in flight, the pod names it without a tag", image: "registry.example/team-a/app", ref: refApp,
			setup: func(e *env) { require.NoError(e.t, e.tr.RecordPullIntent("registry.example/team-a/app:latest")) },
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   pul(credtracker.ReasonPullInFlight),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonPullInFlight),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonPullInFlight),
			},
		},
		{
			name: "a pull without a tag is in flight, the pod names its default tag", image: "registry.example/team-a/app:latest", ref: refApp,
			setup: func(e *env) { require.NoError(e.t, e.tr.RecordPullIntent("registry.example/team-a/app")) },
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   pul(credtracker.ReasonPullInFlight),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonPullInFlight),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonPullInFlight),
			},
		},
		{
			// A pull by tag may be storing this very digest, not yet
			// recorded: a pod that names a digest of the repository waits
			// for it (the kubelet would find no intent for the digest and
			// call the image preloaded).
			name: "a pull by tag is in flight, the pod names a digest of the repository", image: "registry.example/team-a/app@" + refApp, ref: refApp,
			setup: func(e *env) { require.NoError(e.t, e.tr.RecordPullIntent("registry.example/team-a/app:v2")) },
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   pul(credtracker.ReasonPullInFlight),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonPullInFlight),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonPullInFlight),
			},
		},
		{
			name: "a failed pull leaves no intent behind", image: appImage, ref: refApp,
			setup: func(e *env) {
				require.NoError(e.t, e.tr.RecordPullIntent(appImage))
				require.NoError(e.t, e.tr.RecordImagePullFailed(appImage))
			},
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   use(credtracker.ReasonPreloaded),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonNotAllowlisted),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonAlwaysVerify),
			},
		},
		{
			name: "invalid image name fails safe", image: "registry.example/Team-A/app", ref: refApp,
			want: map[credtracker.Policy]outcome{
				credtracker.NeverVerify:                  use(credtracker.ReasonPolicyNeverVerify),
				credtracker.NeverVerifyPreloadedImages:   pul(credtracker.ReasonInvalidImageName),
				credtracker.NeverVerifyAllowlistedImages: pul(credtracker.ReasonInvalidImageName),
				credtracker.AlwaysVerify:                 pul(credtracker.ReasonInvalidImageName),
			},
		},
	}
	for _, tt := range tests {
		for _, policy := range policies {
			t.Run(tt.name+"/"+string(policy), func(t *testing.T) {
				t.Parallel()
				cfg := credtracker.Config{Policy: policy, Allowlist: []string{"registry.example/public/*"}}
				fresh := func(t *testing.T) *env {
					e := newEnv(t, cfg)
					if tt.setup != nil {
						tt.setup(e)
					}
					return e
				}
				e := fresh(t)
				for _, pp := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullNever, corev1.PullAlways} {
					t.Run(string(pp), func(t *testing.T) {
						e := e
						if tt.mutates {
							e = fresh(t)
						}
						req := credtracker.Request{Image: tt.image, ImageRef: tt.ref, PullPolicy: pp, Names: tt.names}
						if req.Names == nil && tt.ref != "" {
							req.Names = []string{tt.image}
						}
						if tt.creds != nil {
							req.Credentials = credsFunc(tt.creds(e)...)
						}
						got := e.tr.Decide(req)
						want := expect(tt.want[policy], pp)
						assert.Equal(t, want.action, got.Action)
						assert.Equal(t, want.reason, got.Reason)

						gotOff := credtracker.Disabled().Decide(req)
						assert.Equal(t, stock(tt.ref != "", pp), gotOff.Action, "gate off")
					})
				}
			})
		}
	}
}

// all is the same outcome under every policy.
func all(o outcome) map[credtracker.Policy]outcome {
	return map[credtracker.Policy]outcome{credtracker.NeverVerify: o, credtracker.NeverVerifyPreloadedImages: o, credtracker.NeverVerifyAllowlistedImages: o, credtracker.AlwaysVerify: o}
}

// verifiedByNode is the outcome for an image the node pulled under this
// name: every policy but NeverVerify applies rule 4.
func verifiedByNode(o outcome) map[credtracker.Policy]outcome {
	m := all(o)
	m[credtracker.NeverVerify] = use(credtracker.ReasonPolicyNeverVerify)
	return m
}

func expect(o outcome, pp corev1.PullPolicy) outcome {
	switch {
	case pp == corev1.PullAlways:
		return pul(credtracker.ReasonAlways)
	case pp == corev1.PullNever && o.action == credtracker.Pull:
		return outcome{credtracker.FailNeverPull, o.reason}
	}
	return o
}

// stock is the kubelet's behaviour with the gate off.
func stock(present bool, pp corev1.PullPolicy) credtracker.Action {
	switch {
	case pp == corev1.PullAlways:
		return credtracker.Pull
	case present:
		return credtracker.UseImage
	case pp == corev1.PullNever:
		return credtracker.FailNeverPull
	default:
		return credtracker.Pull
	}
}

func TestDecideCredentialsAskedOnlyWhenNeeded(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	e.pull("registry.example/public/app:1", refOther, credential.Credential{})
	calls := 0
	creds := func() []credential.Credential { calls++; return nil }
	for _, req := range []credtracker.Request{
		{Image: appImage, ImageRef: refApp, PullPolicy: corev1.PullIfNotPresent, Credentials: creds},                   // preloaded
		{Image: "registry.example/public/app:1", ImageRef: refOther, PullPolicy: corev1.PullNever, Credentials: creds}, // node-accessible
		{Image: appImage, PullPolicy: corev1.PullIfNotPresent, Credentials: creds},                                     // absent
		{Image: appImage, ImageRef: refApp, PullPolicy: corev1.PullAlways, Credentials: creds},                         // always
	} {
		assert.NotEqual(t, credtracker.Action(0), e.tr.Decide(req).Action)
	}
	assert.Zero(t, calls, "no decision above depends on the pod's credentials")
}

func TestCredentialMaxAge(t *testing.T) {
	e := newEnv(t, credtracker.Config{CredentialMaxAge: time.Hour})
	secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
	e.pull(appImage, refApp, secret)
	e.pull("registry.example/public/app:1", refOther, credential.Credential{})
	req := credtracker.Request{Image: appImage, ImageRef: refApp, PullPolicy: corev1.PullIfNotPresent, Credentials: credsFunc(secret)}
	pub := credtracker.Request{Image: "registry.example/public/app:1", ImageRef: refOther, PullPolicy: corev1.PullIfNotPresent}

	e.clock.Step(time.Hour)
	assert.Equal(t, credtracker.ReasonCredentialMatch, e.tr.Decide(req).Reason, "exactly max age is still fresh")
	assert.Equal(t, credtracker.ReasonNodeAccessible, e.tr.Decide(pub).Reason)

	e.clock.Step(time.Second)
	assert.Equal(t, credtracker.Decision{Action: credtracker.Pull, Reason: credtracker.ReasonExpired}, e.tr.Decide(req))
	assert.Equal(t, credtracker.Decision{Action: credtracker.Pull, Reason: credtracker.ReasonExpired}, e.tr.Decide(pub))

	// A successful verification refreshes the entry.
	e.pull(appImage, refApp, secret)
	assert.Equal(t, credtracker.ReasonCredentialMatch, e.tr.Decide(req).Reason)

	// A pull with a tenant's secret proves nothing about anonymous access:
	// it does not renew an expired node-accessible entry.
	e.pull("registry.example/public/app:1", refOther, e.secretCred(reg, "team-c", "regcred", "uid-c", "carol", "pw-c"))
	assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(pub).Reason)
	e.pull("registry.example/public/app:1", refOther, credential.Credential{})
	assert.Equal(t, credtracker.ReasonNodeAccessible, e.tr.Decide(pub).Reason, "an anonymous pull does")
}

func TestSecretPullKeepsAFreshNodeAccessibleEntry(t *testing.T) {
	e := newEnv(t, credtracker.Config{CredentialMaxAge: time.Hour})
	e.pull(appImage, refApp, credential.Credential{})
	e.clock.Step(30 * time.Minute)
	e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
	rr := e.tr.Records()[0].Repositories["registry.example/team-a/app"]
	assert.True(t, rr.NodeAccessible)
	assert.Equal(t, epoch, rr.Updated, "the anonymous verification's time is kept, not renewed")
	e.clock.Step(31 * time.Minute)
	assert.Equal(t, credtracker.ReasonExpired, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason)
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     credtracker.Config
		wantErr string
	}{
		{name: "no dir", cfg: credtracker.Config{}, wantErr: "Dir is required"},
		{name: "bad policy", cfg: credtracker.Config{Dir: t.TempDir(), Policy: "Sometimes"}, wantErr: `"Sometimes"`},
		{name: "bad allowlist", cfg: credtracker.Config{Dir: t.TempDir(), Allowlist: []string{"a/*/b"}}, wantErr: "preloadedImagesVerificationAllowlist[0]"},
		{name: "negative max age", cfg: credtracker.Config{Dir: t.TempDir(), CredentialMaxAge: -time.Second}, wantErr: "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := credtracker.New(t.Context(), tt.cfg, &fakeInventory{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

// TestAllowlistedFamiliarNameDecides: a kubelet configuration's
// preloadedImagesVerificationAllowlist: [ubuntu] frees a preloaded ubuntu
// image for pods that spell it "ubuntu", "ubuntu:tag" or
// "ubuntu@sha256:...", as the kubelet frees it, and in its fully qualified
// spelling too; another repository is still not allowlisted, and a name
// this node pulled with a secret still needs credentials.
func TestAllowlistedFamiliarNameDecides(t *testing.T) {
	e := newEnv(t, credtracker.Config{Policy: credtracker.NeverVerifyAllowlistedImages, Allowlist: []string{"ubuntu"}})
	names := []string{"docker.io/library/ubuntu:24.04", "docker.io/library/ubuntu@" + refApp}
	for _, image := range []string{"ubuntu", "ubuntu:24.04", "ubuntu@" + refApp, "docker.io/library/ubuntu:24.04"} {
		for _, pp := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullNever} {
			d := e.tr.Decide(credtracker.Request{Image: image, ImageRef: refApp, Names: names, PullPolicy: pp})
			assert.Equal(t, decision(credtracker.UseImage, credtracker.ReasonAllowlisted), d, "%s (%s)", image, pp)
		}
	}
	d := e.tr.Decide(credtracker.Request{Image: "ubuntu2:1", ImageRef: refBase, Names: []string{"docker.io/library/ubuntu2:1"}, PullPolicy: corev1.PullNever})
	assert.Equal(t, decision(credtracker.FailNeverPull, credtracker.ReasonNotAllowlisted), d)

	e.pull("ubuntu:24.04", refApp, e.secretCred("docker.io", "team-a", "regcred", "uid-a", "alice", "pw"))
	d = e.tr.Decide(credtracker.Request{Image: "ubuntu:24.04", ImageRef: refApp, Names: names, PullPolicy: corev1.PullNever})
	assert.Equal(t, decision(credtracker.FailNeverPull, credtracker.ReasonNoMatch), d, "the allowlist frees preloaded images only")
}
