package credtracker_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/pullguard/pullguard/pkg/credential"
)

func ifNotPresent(image, ref string, creds ...credential.Credential) credtracker.Request {
	return credtracker.Request{Image: image, ImageRef: ref, Names: []string{image}, PullPolicy: corev1.PullIfNotPresent, Credentials: credsFunc(creds...)}
}

func TestRecordsSurviveRestart(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
	sa := e.saCred(reg, "team-a", "builder", "sa-uid", "tok")
	e.pull(appImage, refApp, secret)
	e.pull("registry.example/team-a/tool:1", refBase, sa)
	e.pull("registry.example/public/app:1", refOther, credential.Credential{})
	before := e.tr.Records()

	e.restart()
	assert.Equal(t, before, e.tr.Records())
	assert.Equal(t, 3, e.tr.Status().Records)
	assert.False(t, e.tr.Status().HashKeyCreated, "the hash key is kept across restarts")
	assert.Equal(t, credtracker.ReasonCredentialMatch, e.tr.Decide(ifNotPresent(appImage, refApp, secret)).Reason)
	assert.Equal(t, credtracker.ReasonServiceAccount, e.tr.Decide(ifNotPresent("registry.example/team-a/tool:1", refBase, sa)).Reason)
	assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason)
	assert.Equal(t, credtracker.ReasonNodeAccessible, e.tr.Decide(ifNotPresent("registry.example/public/app:1", refOther)).Reason)
}

func TestLostHashKeyMeansVerifyAgain(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
	require.NoError(t, e.tr.Close())
	require.NoError(t, os.Remove(filepath.Join(e.dir, credtracker.HashKeyFile)))
	e.inv.images = []credtracker.Image{{Ref: refApp, Names: []string{appImage}}}
	e.start()
	st := e.tr.Status()
	assert.True(t, st.HashKeyCreated)
	// The store was sealed with the old key: it is not trusted at all.
	assert.Contains(t, st.RecoveryReason, "not made with this node's key")
	// Same content, same or other coordinates: the image must be verified.
	for _, c := range []credential.Credential{
		e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"),
		e.secretCred(reg, "team-c", "copy", "uid-c", "alice", "pw"),
	} {
		assert.Equal(t, credtracker.ReasonUnknownOrigin, e.tr.Decide(ifNotPresent(appImage, refApp, c)).Reason)
	}
}

func TestLeftoverIntentBecomesRecordWithNoCredentials(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
	// The pull started, the image landed, the process died before it
	// recorded the pull.
	require.NoError(t, e.tr.RecordPullIntent(appImage))
	require.NoError(t, e.tr.RecordPullIntent("registry.example/team-a/gone:1"))
	assert.Equal(t, 2, e.tr.Status().Intents)
	e.inv.images = []credtracker.Image{{Ref: refApp, Names: []string{"registry.example/team-a/app:v1", "registry.example/team-a/app@" + strings.Repeat("ab", 32)}}}
	e.restart()

	st := e.tr.Status()
	assert.Equal(t, 0, st.Intents, "every leftover intent is resolved")
	recs := e.tr.Records()
	require.Len(t, recs, 1, "only the present image gets a record")
	rr := recs[0].Repositories["registry.example/team-a/app"]
	require.NotNil(t, rr)
	assert.False(t, rr.NodeAccessible)
	assert.Empty(t, rr.Secrets)
	// Nobody is known to hold a credential: even the tenant whose pull it
	// was must verify once.
	assert.Equal(t, credtracker.Decision{Action: credtracker.Pull, Reason: credtracker.ReasonNoMatch}, e.tr.Decide(ifNotPresent(appImage, refApp, secret)))
	assert.Equal(t, credtracker.FailNeverPull, e.tr.Decide(credtracker.Request{Image: appImage, ImageRef: refApp, PullPolicy: corev1.PullNever}).Action)

	// The next restart finds nothing left to resolve.
	e.restart()
	assert.Equal(t, 0, e.tr.Status().Intents)
}

func TestLeftoverIntentKeptWhenRuntimeCannotBeListed(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	require.NoError(t, e.tr.RecordPullIntent(appImage))
	e.inv.err = errors.New("runtime unavailable")
	e.restart()
	assert.Equal(t, 1, e.tr.Status().Intents)
	assert.Equal(t, credtracker.ReasonPullInFlight, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason)
	assert.Equal(t, credtracker.ReasonPullInFlight, e.tr.Decide(ifNotPresent("registry.example/team-a/app@"+refApp, refApp)).Reason,
		"the leftover pull may have stored this digest")
	assert.Equal(t, credtracker.ReasonPreloaded, e.tr.Decide(ifNotPresent("registry.example/team-a/app:v9", refApp)).Reason,
		"another tag is another image, as the kubelet counts intents")

	e.inv.err = nil
	e.inv.images = []credtracker.Image{{Ref: refApp, Names: []string{appImage}}}
	e.restart()
	assert.Equal(t, 0, e.tr.Status().Intents)
	assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason)
}

func TestConcurrentPullsOfOneImageShareAnIntent(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	require.NoError(t, e.tr.RecordPullIntent(appImage))
	require.NoError(t, e.tr.RecordPullIntent(appImage))
	require.NoError(t, e.tr.RecordImagePullFailed(appImage))
	assert.Equal(t, credtracker.ReasonPullInFlight, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason, "one pull is still in flight")
	require.NoError(t, e.tr.RecordImagePulled(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")))
	assert.Equal(t, 0, e.tr.Status().Intents)
	assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason)
}

func TestCorruptStoreIsSetAsideAndReseeded(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
	require.NoError(t, e.tr.Close())
	path := filepath.Join(e.dir, credtracker.StoreFile)
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("garbage!"), 4096), 0o600))

	e.inv.images = []credtracker.Image{{Ref: refApp, Names: []string{appImage}}, {Ref: refBase, Names: []string{"registry.example/preloaded/base:1"}}}
	e.start()
	st := e.tr.Status()
	assert.NotZero(t, st.RecoveredAt)
	assert.Contains(t, st.RecoveryReason, "unreadable")
	assert.FileExists(t, st.AsidePath, "the unreadable store is kept for inspection")
	assert.False(t, st.Degraded)
	assert.Equal(t, 2, st.Records)

	// Every present image needs verification, under every policy but
	// NeverVerify, including one that was really preloaded.
	for _, req := range []credtracker.Request{ifNotPresent(appImage, refApp), ifNotPresent("registry.example/preloaded/base:1", refBase)} {
		assert.Equal(t, credtracker.Decision{Action: credtracker.Pull, Reason: credtracker.ReasonUnknownOrigin}, e.tr.Decide(req))
	}
	// A successful verification fills the record again.
	secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
	e.pull(appImage, refApp, secret)
	assert.Equal(t, credtracker.ReasonCredentialMatch, e.tr.Decide(ifNotPresent(appImage, refApp, secret)).Reason)
	assert.Equal(t, credtracker.ReasonUnknownOrigin, e.tr.Decide(ifNotPresent("registry.example/other-name/app:v1", refApp)).Reason,
		"other names of the image still need verification")

	// The recovery is still reported after a restart.
	e.restart()
	assert.Equal(t, st.AsidePath, e.tr.Status().AsidePath)
}

func TestCorruptStoreWithRuntimeDownIsDegradedUntilSeeded(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	require.NoError(t, e.tr.Close())
	require.NoError(t, os.WriteFile(filepath.Join(e.dir, credtracker.StoreFile), []byte("not a database"), 0o600))
	e.inv.err = errors.New("runtime unavailable")
	e.start()
	assert.True(t, e.tr.Status().Degraded)
	assert.Equal(t, credtracker.ReasonRecordsUnreadable, e.tr.Decide(ifNotPresent("registry.example/preloaded/base:1", refBase)).Reason)

	// Restarting over the new (readable, empty) store must not forget that
	// the seed is still owed.
	e.restart()
	assert.True(t, e.tr.Status().Degraded)
	assert.Equal(t, credtracker.ReasonRecordsUnreadable, e.tr.Decide(ifNotPresent("registry.example/preloaded/base:1", refBase)).Reason)

	e.inv.err = nil
	e.inv.images = []credtracker.Image{{Ref: refBase, Names: []string{"registry.example/preloaded/base:1"}}}
	e.restart()
	assert.False(t, e.tr.Status().Degraded)
	assert.Equal(t, credtracker.ReasonUnknownOrigin, e.tr.Decide(ifNotPresent("registry.example/preloaded/base:1", refBase)).Reason)
	assert.Equal(t, credtracker.ReasonPreloaded, e.tr.Decide(ifNotPresent("registry.example/later/x:1", refOther)).Reason,
		"an image that arrives after the seed is preloaded again")
}

// flipValueByte changes one byte in the middle of a stored record's value,
// as bit rot would, without touching bbolt's own structures.
func flipValueByte(t *testing.T, path, ref string, offset int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("pulled"))
		v := append([]byte(nil), b.Get([]byte(ref))...)
		require.NotEmpty(t, v)
		v[offset%len(v)] ^= 0x01
		return b.Put([]byte(ref), v)
	}))
}

func TestCorruptRecordIsNeverTrusted(t *testing.T) {
	for _, offset := range []int{0, 5, 40, 80, 120, 160, 200, -1} {
		t.Run("", func(t *testing.T) {
			e := newEnv(t, credtracker.Config{})
			// A node-accessible record is the one a flipped bit could turn
			// into a grant; a secret record the one it could hand over.
			e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
			require.NoError(t, e.tr.Close())
			// The change is made through bbolt, as a tool or a bug might:
			// bbolt's structure stays valid, the store's seal does not.
			flipValueByte(t, filepath.Join(e.dir, credtracker.StoreFile), refApp, offset+1000)
			e.inv.images = []credtracker.Image{{Ref: refApp, Names: []string{appImage}}}
			e.start()

			st := e.tr.Status()
			assert.NotZero(t, st.RecoveredAt)
			assert.Contains(t, st.RecoveryReason, "integrity seal does not match")
			for _, pp := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullNever} {
				d := e.tr.Decide(credtracker.Request{Image: appImage, ImageRef: refApp, PullPolicy: pp})
				assert.NotEqual(t, credtracker.UseImage, d.Action)
				assert.Equal(t, credtracker.ReasonUnknownOrigin, d.Reason)
			}
			// The store was set aside and replaced: the next start is clean.
			e.restart()
			assert.Equal(t, st.RecoveredAt, e.tr.Status().RecoveredAt, "no second recovery")
			assert.Equal(t, credtracker.ReasonUnknownOrigin, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason)
		})
	}
}

func TestNoCredentialMaterialOnDisk(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	secrets := []struct{ user, pass string }{{"alice-user-7f3a", "hunter2-password-91c"}, {"bob-user-c3d2", "correct-horse-battery-e8"}}
	for i, s := range secrets {
		auth := credential.AuthConfig{Username: s.user, Password: s.pass, Auth: base64.StdEncoding.EncodeToString([]byte(s.user + ":" + s.pass)), IdentityToken: "idtok-" + s.pass, RegistryToken: "regtok-" + s.pass}
		e.pull(appImage, refApp, credential.Credential{Registry: reg, Auth: auth, Source: credential.Source{Kind: credential.SourceSecret, Namespace: "ns", Name: "s" + string(rune('a'+i)), UID: "u"}, Hash: e.tr.Hasher().Hash(reg, auth)})
	}
	require.NoError(t, e.tr.Close())

	var needles []string
	for _, s := range secrets {
		needles = append(needles, s.user, s.pass, base64.StdEncoding.EncodeToString([]byte(s.user+":"+s.pass)), "idtok-"+s.pass, "regtok-"+s.pass)
	}
	files := 0
	require.NoError(t, filepath.WalkDir(e.dir, func(path string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		if d.IsDir() {
			return nil
		}
		files++
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		for i, n := range needles {
			assert.False(t, bytes.Contains(data, []byte(n)), "credential material #%d found in %s", i, filepath.Base(path))
		}
		return nil
	}))
	assert.GreaterOrEqual(t, files, 2, "the store and the hash key were scanned")
}

func TestPruneImages(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
	e.pull(appImage, refApp, secret)
	e.pull("registry.example/team-a/base:1", refBase, secret)
	listedAt := e.clock.Now().Add(time.Second)
	e.clock.Step(2 * time.Second)
	// A pull that finished after the list was taken must survive it.
	e.pull("registry.example/team-a/new:1", refOther, secret)

	removed, err := e.tr.PruneImages([]credtracker.Image{{Ref: refApp}}, listedAt)
	require.NoError(t, err)
	assert.Equal(t, 1, removed)
	refs := []string{}
	for _, r := range e.tr.Records() {
		refs = append(refs, r.ImageRef)
	}
	assert.Equal(t, []string{refApp, refOther}, refs)

	e.restart()
	assert.Len(t, e.tr.Records(), 2, "the pruning is durable")
}

// TestPruneImage: the record of one removed image goes, durably, at a
// cost that does not depend on the other records; a record written at or
// after the removal was asked (a pull that finished meanwhile) stays, and
// so does every other record.
func TestPruneImage(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ref         string
		afterPull   time.Duration // removedAt, after the last pull
		wantRemoved bool
		wantRefs    []string
	}{
		{name: "removed image", ref: refApp, afterPull: time.Second, wantRemoved: true, wantRefs: []string{refBase}},
		{name: "pulled again when the removal was asked", ref: refBase, afterPull: 0, wantRefs: []string{refApp, refBase}},
		{name: "no record", ref: refOther, afterPull: time.Second, wantRefs: []string{refApp, refBase}},
		{name: "not an image ref", ref: "", afterPull: time.Second, wantRefs: []string{refApp, refBase}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, credtracker.Config{})
			secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
			e.pull(appImage, refApp, secret)
			e.pull("registry.example/team-a/base:1", refBase, secret)
			removedAt := e.clock.Now().Add(tc.afterPull)
			e.clock.Step(2 * time.Second)

			removed, err := e.tr.PruneImage(tc.ref, removedAt)
			require.NoError(t, err)
			assert.Equal(t, tc.wantRemoved, removed)
			refsOf := func() []string {
				refs := []string{}
				for _, r := range e.tr.Records() {
					refs = append(refs, r.ImageRef)
				}
				return refs
			}
			assert.Equal(t, tc.wantRefs, refsOf())
			assert.Equal(t, len(tc.wantRefs), e.tr.Status().Records)
			e.restart()
			assert.Equal(t, tc.wantRefs, refsOf(), "durable")
		})
	}
}

func TestForget(t *testing.T) {
	tests := []struct {
		name       string
		forget     func(tr credtracker.Tracker) error
		wantSecret bool
		wantSA     bool
		wantOther  bool
	}{
		{name: "secret", forget: func(tr credtracker.Tracker) error { return tr.ForgetSecret("team-a", "regcred", "uid-a") }, wantSA: true, wantOther: true},
		{name: "secret with another uid is kept", forget: func(tr credtracker.Tracker) error { return tr.ForgetSecret("team-a", "regcred", "uid-old") }, wantSecret: true, wantSA: true, wantOther: true},
		{name: "service account", forget: func(tr credtracker.Tracker) error { return tr.ForgetServiceAccount("team-a", "builder", "sa-uid") }, wantSecret: true, wantOther: true},
		{name: "namespace", forget: func(tr credtracker.Tracker) error { return tr.ForgetNamespace("team-a") }, wantOther: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, credtracker.Config{})
			secret := e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw")
			sa := e.saCred(reg, "team-a", "builder", "sa-uid", "tok")
			other := e.secretCred(reg, "team-b", "regcred", "uid-b", "bob", "pw-b")
			e.pull(appImage, refApp, secret)
			e.pull(appImage, refApp, sa)
			e.pull(appImage, refApp, other)
			require.NoError(t, tt.forget(e.tr))
			e.restart()

			check := func(c credential.Credential, want bool) {
				d := e.tr.Decide(ifNotPresent(appImage, refApp, c))
				assert.Equal(t, want, d.Action == credtracker.UseImage, "%s: %s", c.Source, d.Reason)
			}
			check(secret, tt.wantSecret)
			check(sa, tt.wantSA)
			check(other, tt.wantOther)
			assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason, "the record stays: the image still needs credentials")
		})
	}
}

func TestEntriesAreBounded(t *testing.T) {
	e := newEnv(t, credtracker.Config{MaxEntries: 3})
	var creds []credential.Credential
	for i := range 4 {
		c := e.secretCred(reg, "ns", "s"+string(rune('0'+i)), "u", "user", "pw"+string(rune('0'+i)))
		creds = append(creds, c)
		e.pull(appImage, refApp, c)
		e.clock.Step(time.Second)
	}
	rr := e.tr.Records()[0].Repositories["registry.example/team-a/app"]
	assert.Len(t, rr.Secrets, 3)
	assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(ifNotPresent(appImage, refApp, creds[0])).Reason, "the least recently verified entry was dropped")
	assert.Equal(t, credtracker.ReasonCredentialMatch, e.tr.Decide(ifNotPresent(appImage, refApp, creds[3])).Reason)
}

func TestReadRecords(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
	require.NoError(t, e.tr.RecordPullIntent("registry.example/x/y:1"))
	want := e.tr.Records()
	require.NoError(t, e.tr.Close())

	got, st, err := credtracker.ReadRecords(e.dir)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, 1, st.Records)
	assert.Equal(t, 1, st.Intents)

	empty, _, err := credtracker.ReadRecords(t.TempDir())
	require.NoError(t, err)
	assert.Empty(t, empty)

	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, credtracker.HashKeyFile), bytes.Repeat([]byte{7}, credential.KeySize), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(bad, credtracker.StoreFile), []byte("junk"), 0o600))
	_, _, err = credtracker.ReadRecords(bad)
	assert.ErrorContains(t, err, "unreadable")
	e.start()
}

func TestLeftoverIntentSurvivesLaterPulls(t *testing.T) {
	e := newEnv(t, credtracker.Config{})
	require.NoError(t, e.tr.RecordPullIntent(appImage)) // then a crash
	e.inv.err = errors.New("runtime unavailable")
	e.restart()

	// Another tenant tries and is refused; its pull's intent comes and goes.
	require.NoError(t, e.tr.RecordPullIntent(appImage))
	require.NoError(t, e.tr.RecordImagePullFailed(appImage))
	assert.Equal(t, credtracker.ReasonPullInFlight, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason)

	// At the next start the runtime answers: the leftover intent is still
	// there and the image needs verification.
	e.inv.err = nil
	e.inv.images = []credtracker.Image{{Ref: refApp, Names: []string{appImage}}}
	e.restart()
	assert.Equal(t, credtracker.ReasonNoMatch, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason)
}

func TestMissingStoreIsNotAFreshStart(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   string
	}{
		{
			name: "the store file is lost",
			break_: func(t *testing.T, dir string) {
				require.NoError(t, os.Remove(filepath.Join(dir, credtracker.StoreFile)))
			},
			want: "hash key is not new",
		},
		{
			name: "a crash after the unreadable store was set aside",
			break_: func(t *testing.T, dir string) {
				p := filepath.Join(dir, credtracker.StoreFile)
				require.NoError(t, os.Rename(p, p+".unreadable-20261121T120000.000000000Z"))
				require.NoError(t, os.WriteFile(p+".new", []byte("half a store"), 0o600))
			},
			want: "missing after it was set aside",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, credtracker.Config{})
			e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
			require.NoError(t, e.tr.Close())
			tt.break_(t, e.dir)
			e.inv.images = []credtracker.Image{{Ref: refApp, Names: []string{appImage}}}
			e.start()
			st := e.tr.Status()
			assert.NotZero(t, st.RecoveredAt)
			assert.Contains(t, st.RecoveryReason, tt.want)
			assert.Equal(t, credtracker.ReasonUnknownOrigin, e.tr.Decide(ifNotPresent(appImage, refApp)).Reason, "not preloaded")
			assert.NoFileExists(t, filepath.Join(e.dir, credtracker.StoreFile+".new"))
		})
	}

	t.Run("a node's first start is a fresh start", func(t *testing.T) {
		e := newEnv(t, credtracker.Config{})
		assert.Zero(t, e.tr.Status().RecoveredAt)
	})
}

// TestStoreFilesAreWrittenDurably shows the order of the writes that put
// the tracker's files in place: the hash key written, fsynced, renamed,
// its directory fsynced; a new store (which bbolt fsyncs at its commit)
// renamed into place and the directory fsynced, at the first start and
// when an unreadable store is replaced.
func TestStoreFilesAreWrittenDurably(t *testing.T) {
	renamed := []string{durabletest.StepRename, durabletest.StepSyncDir}
	for _, tc := range []struct {
		name string
		// before runs before the start whose writes are recorded.
		before func(t *testing.T, e *env)
		want   map[string][][]string
	}{{
		name: "first start",
		want: map[string][][]string{
			credtracker.HashKeyFile: {durabletest.Durable},
			credtracker.StoreFile:   {renamed},
		},
	}, {
		name: "an unreadable store is replaced",
		before: func(t *testing.T, e *env) {
			e.start()
			e.pull(appImage, refApp, e.secretCred(reg, "team-a", "regcred", "uid-a", "alice", "pw"))
			require.NoError(t, e.tr.Close())
			require.NoError(t, os.WriteFile(filepath.Join(e.dir, credtracker.StoreFile), []byte("not a store"), 0o600))
		},
		want: map[string][][]string{
			credtracker.HashKeyFile: nil,
			credtracker.StoreFile:   {renamed},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := &env{t: t, dir: dir, clock: clocktesting.NewFakeClock(epoch), inv: &fakeInventory{}, cfg: credtracker.Config{Dir: dir}}
			if tc.before != nil {
				tc.before(t, e)
			}
			rec := durabletest.Record(t, dir)
			e.start()
			for file, want := range tc.want {
				assert.Equal(t, want, rec.Writes(filepath.Join(dir, file)), "%s: operations %v", file, rec.Ops())
			}
		})
	}
}
