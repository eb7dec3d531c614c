package criproxy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criproxy"
)

const reg = "127.0.0.1:5000"

func id(n int) string { return fmt.Sprintf("sha256:%064x", n) }

var policies = []credtracker.Policy{credtracker.NeverVerify, credtracker.NeverVerifyPreloadedImages, credtracker.NeverVerifyAllowlistedImages, credtracker.AlwaysVerify}

// TestImageStatusMatrix checks step 1 of docs/decision-matrix.md through
// the CRI: for a pod that shows nothing (ImageStatus carries no pod), a
// present image is reported present exactly when the decision is "use".
func TestImageStatusMatrix(t *testing.T) {
	app := reg + "/public/app:v1"
	tests := []struct {
		name      string
		allowlist []string
		corrupt   bool // start on an unreadable store that cannot be rebuilt
		setup     func(t *testing.T, h *harness) (image string, done func())
		want      map[credtracker.Policy]bool
	}{{
		name:      "no record, allowlisted",
		allowlist: []string{reg + "/public/*"},
		setup: func(t *testing.T, h *harness) (string, func()) {
			h.fake.preload(t, id(1), app)
			return app, nil
		},
		want: map[credtracker.Policy]bool{credtracker.NeverVerify: true, credtracker.NeverVerifyPreloadedImages: true, credtracker.NeverVerifyAllowlistedImages: true, credtracker.AlwaysVerify: false},
	}, {
		name:      "no record, not allowlisted",
		allowlist: []string{reg + "/other/*"},
		setup: func(t *testing.T, h *harness) (string, func()) {
			h.fake.preload(t, id(1), app)
			return app, nil
		},
		want: map[credtracker.Policy]bool{credtracker.NeverVerify: true, credtracker.NeverVerifyPreloadedImages: true, credtracker.NeverVerifyAllowlistedImages: false, credtracker.AlwaysVerify: false},
	}, {
		name:      "a pull of another tag of this repository in flight (counted per image, as the kubelet does)",
		allowlist: []string{reg + "/public/*"},
		setup: func(t *testing.T, h *harness) (string, func()) {
			h.fake.preload(t, id(1), app)
			h.fake.publish(t, reg+"/public/app:v2", id(2), "alice:pw")
			gate, entered := make(chan struct{}), make(chan string, 1)
			h.fake.gate, h.fake.entered = gate, entered
			errc := make(chan error, 1)
			go func() { _, err := h.pull(t, "a", reg+"/public/app:v2", "alice", "pw"); errc <- err }()
			<-entered
			return app, func() { close(gate); assert.NoError(t, <-errc) }
		},
		want: map[credtracker.Policy]bool{credtracker.NeverVerify: true, credtracker.NeverVerifyPreloadedImages: true, credtracker.NeverVerifyAllowlistedImages: true, credtracker.AlwaysVerify: false},
	}, {
		name:      "unknown origin",
		allowlist: []string{reg + "/public/*"},
		setup: func(t *testing.T, h *harness) (string, func()) {
			h.fake.preload(t, id(1), app)
			imp, ok := h.tracker.(credtracker.Importer)
			require.True(t, ok)
			require.NoError(t, imp.Import(nil, []string{id(1)}, "test"))
			return app, nil
		},
		want: map[credtracker.Policy]bool{credtracker.NeverVerify: true, credtracker.NeverVerifyPreloadedImages: false, credtracker.NeverVerifyAllowlistedImages: false, credtracker.AlwaysVerify: false},
	}, {
		name: "asked by image ID, pulled under another name",
		setup: func(t *testing.T, h *harness) (string, func()) {
			h.fake.publish(t, reg+"/team-a/app:v1", id(2), "alice:pw")
			_, err := h.pull(t, "a", reg+"/team-a/app:v1", "alice", "pw")
			require.NoError(t, err)
			return id(2), nil
		},
		want: map[credtracker.Policy]bool{credtracker.NeverVerify: true, credtracker.NeverVerifyPreloadedImages: false, credtracker.NeverVerifyAllowlistedImages: false, credtracker.AlwaysVerify: false},
	}, {
		name:    "store unreadable and not rebuilt (degraded)",
		corrupt: true,
		setup: func(t *testing.T, h *harness) (string, func()) {
			h.fake.preload(t, id(1), app)
			return app, nil
		},
		want: map[credtracker.Policy]bool{credtracker.NeverVerify: true, credtracker.NeverVerifyPreloadedImages: false, credtracker.NeverVerifyAllowlistedImages: false, credtracker.AlwaysVerify: false},
	}, {
		name: "pulled under this name anonymously (node-accessible)",
		setup: func(t *testing.T, h *harness) (string, func()) {
			h.fake.publish(t, app, id(3), "")
			_, err := h.pull(t, "a", app, "", "")
			require.NoError(t, err)
			return app, nil
		},
		want: map[credtracker.Policy]bool{credtracker.NeverVerify: true, credtracker.NeverVerifyPreloadedImages: true, credtracker.NeverVerifyAllowlistedImages: true, credtracker.AlwaysVerify: true},
	}, {
		name:      "pulled under this name with a tenant's credential",
		allowlist: []string{reg + "/team-a/*"},
		setup: func(t *testing.T, h *harness) (string, func()) {
			h.fake.publish(t, reg+"/team-a/app:v1", id(2), "alice:pw")
			_, err := h.pull(t, "a", reg+"/team-a/app:v1", "alice", "pw")
			require.NoError(t, err)
			return reg + "/team-a/app:v1", nil
		},
		want: map[credtracker.Policy]bool{credtracker.NeverVerify: true, credtracker.NeverVerifyPreloadedImages: false, credtracker.NeverVerifyAllowlistedImages: false, credtracker.AlwaysVerify: false},
	}}
	for _, tc := range tests {
		for _, p := range policies {
			t.Run(tc.name+"/"+string(p), func(t *testing.T) {
				cfg := harnessConfig{policy: p, allowlist: tc.allowlist}
				if tc.corrupt {
					cfg.dir = corruptStore(t)
					cfg.setup = func(f *fakeBackend) { f.down = true }
				}
				h := newHarness(t, cfg)
				h.fake.setDown(false)
				if tc.corrupt {
					require.True(t, h.tracker.Status().Degraded)
				}
				image, done := tc.setup(t, h)
				assert.Equal(t, tc.want[p], h.present(t, image))
				if done != nil {
					done()
				}
			})
		}
	}
}

// corruptStore returns a tracker directory whose store cannot be read
// (and, with the backend down, cannot be rebuilt).
func corruptStore(t *testing.T) string {
	dir := t.TempDir()
	_, _, err := credential.LoadOrCreateHasher(filepath.Join(dir, credtracker.HashKeyFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, credtracker.StoreFile), []byte(strings.Repeat("not a bbolt file", 400)), 0o600))
	return dir
}

// TestPullImageMatrix checks step 2 of docs/decision-matrix.md through the
// CRI, with the registry traffic each outcome costs.
func TestPullImageMatrix(t *testing.T) {
	private := reg + "/team-a/app:v1"
	type step struct {
		ns, user, password string
		image              string // default private
		always             bool   // an Always container: no ImageStatus before the pull
		wantErr            string // "" for success
		wantManifest       int    // registry requests this step makes
		wantBlobs          int
	}
	tests := []struct {
		name    string
		gateOff bool
		steps   []step
	}{{
		name: "same credential again: answered from the record",
		steps: []step{
			{ns: "a", user: "alice", password: "pw", wantManifest: 1, wantBlobs: 2},
			{ns: "a", user: "alice", password: "pw"},
			{ns: "a2", user: "alice", password: "pw"}, // the same content proves the same access
		},
	}, {
		name: "an Always container is forwarded, even with a recorded credential",
		steps: []step{
			{ns: "a", user: "alice", password: "pw", wantManifest: 1, wantBlobs: 2},
			{ns: "a", user: "alice", password: "pw", always: true, wantManifest: 1},
			{ns: "b", user: "bob", password: "bad", always: true, wantErr: "401 Unauthorized", wantManifest: 1},
		},
	}, {
		name: "another tenant's credential: the registry refuses, no blobs",
		steps: []step{
			{ns: "a", user: "alice", password: "pw", wantManifest: 1, wantBlobs: 2},
			{ns: "b", user: "bob", password: "bad", wantErr: "401 Unauthorized", wantManifest: 1},
			{ns: "b", wantErr: "401 Unauthorized", wantManifest: 1},
		},
	}, {
		name: "a third tenant with its own access: verified with one manifest request",
		steps: []step{
			{ns: "a", user: "alice", password: "pw", wantManifest: 1, wantBlobs: 2},
			{ns: "c", user: "carol", password: "pw", wantManifest: 1},
			{ns: "c", user: "carol", password: "pw"},
		},
	}, {
		name: "a rotated secret is verified by the registry (the CRI shows no coordinates)",
		steps: []step{
			{ns: "a", user: "alice", password: "pw", wantManifest: 1, wantBlobs: 2},
			{ns: "a", user: "alice", password: "pw2", wantManifest: 1},
			{ns: "a", user: "alice", password: "pw2"},
		},
	}, {
		name: "the same credential for another name is verified",
		steps: []step{
			{ns: "a", user: "alice", password: "pw", wantManifest: 1, wantBlobs: 2},
			{ns: "a", user: "alice", password: "pw", image: reg + "/team-a/alias:v1", wantManifest: 1},
		},
	}, {
		name:    "gate off: every pull is forwarded",
		gateOff: true,
		steps: []step{
			{ns: "a", user: "alice", password: "pw", wantManifest: 1, wantBlobs: 2},
			{ns: "a", user: "alice", password: "pw", always: true, wantManifest: 1},
			{ns: "b", user: "bob", password: "bad", always: true, wantErr: "401 Unauthorized", wantManifest: 1},
			{ns: "b"}, // IfNotPresent: the stock kubelet hands the present image to anyone
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{gateOff: tc.gateOff})
			h.fake.publish(t, private, id(7), "alice:pw", "alice:pw2", "carol:pw")
			h.fake.publish(t, reg+"/team-a/alias:v1", id(7), "alice:pw")
			for i, s := range tc.steps {
				image := s.image
				if image == "" {
					image = private
				}
				m0, b0, _ := h.fake.counts()
				pull := h.pull
				if s.always {
					// Long after any ImageStatus: nothing marks it as
					// the kubelet's IfNotPresent path.
					h.clock.Step(criproxy.DefaultAnswerWindow + time.Second)
					pull = h.pullAlways
				}
				ref, err := pull(t, s.ns, image, s.user, s.password)
				m1, b1, _ := h.fake.counts()
				if s.wantErr != "" {
					require.Error(t, err, "step %d", i)
					assert.Contains(t, err.Error(), s.wantErr, "step %d", i)
				} else {
					require.NoError(t, err, "step %d", i)
					assert.Equal(t, id(7), ref, "step %d", i)
					// The kubelet's puller asks the image's size after a
					// successful pull (GetImageSize); container creation
					// asks its user below.
					assert.Equal(t, tc.gateOff, h.present(t, private), "GetImageSize, step %d", i)
				}
				assert.Equal(t, s.wantManifest, m1-m0, "manifest requests, step %d", i)
				assert.Equal(t, s.wantBlobs, b1-b0, "blob requests, step %d", i)
				if !tc.gateOff {
					assert.False(t, h.present(t, private), "a credential-pulled image stays hidden from ImageStatus, step %d", i)
				} else {
					assert.True(t, h.present(t, private), "gate off: a pass-through, step %d", i)
				}
			}
		})
	}
}

// TestKubernetes138175 checks that pulling digest D under team-a/base with
// a secret leaves a preloaded shared/base with the same digest free.
func TestKubernetes138175(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.fake.preload(t, id(9), reg+"/shared/base:v1")
	h.fake.publish(t, reg+"/team-a/base:v1", id(9), "alice:pw")
	_, err := h.pull(t, "a", reg+"/team-a/base:v1", "alice", "pw")
	require.NoError(t, err)
	assert.True(t, h.present(t, reg+"/shared/base:v1"), "the preloaded name stays free")
	assert.False(t, h.present(t, reg+"/team-a/base:v1"), "the pulled name needs credentials")
	resp, err := h.client.ImageStatus(context.Background(), h.newPod("b", nil).spec(reg+"/team-a/base:v1"), true)
	require.NoError(t, err)
	assert.Empty(t, resp.GetInfo(), "a hidden image's verbose info is hidden too")
}

// TestPullReusesTheStatusBehindAbsent: the pull that follows a pod's
// "absent" answer is decided on the status that answer saw (no second
// runtime call) while it is fresh, and on a live one after that.
func TestPullReusesTheStatusBehindAbsent(t *testing.T) {
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(1), "alice:pw")
	_, err := h.pull(t, "a", image, "alice", "pw")
	require.NoError(t, err)

	p := h.newPod("a", nil)
	before := h.fake.statusCalls()
	require.Empty(t, p.presence(t, image))
	_, err = p.pullOnly(t, image, "alice", "pw")
	require.NoError(t, err)
	assert.Equal(t, 1, h.fake.statusCalls()-before, "only the kubelet's ImageStatus reached the runtime")

	q := h.newPod("a", nil)
	require.Empty(t, q.presence(t, image))
	h.clock.Step(time.Minute) // within the answer window, past the status's freshness
	before = h.fake.statusCalls()
	_, _, pulls0 := h.fake.counts()
	_, err = q.pullOnly(t, image, "alice", "pw")
	require.NoError(t, err)
	_, _, pulls1 := h.fake.counts()
	assert.Equal(t, 1, h.fake.statusCalls()-before, "a live status")
	assert.Equal(t, pulls0, pulls1, "still answered from the record")
}

// TestPodWithSeveralCredentials follows the kubelet for a pod with two
// pull secrets: one presence check ("absent"), then PullImage with each
// credential in turn until one succeeds. The first (another account) goes
// to the registry and is refused; the second, recorded, is answered.
func TestPodWithSeveralCredentials(t *testing.T) {
	image := reg + "/team-a/app:v1"
	h := newHarness(t, harnessConfig{})
	h.fake.publish(t, image, id(1), "alice:pw")
	_, err := h.pull(t, "a", image, "alice", "pw")
	require.NoError(t, err)

	p := h.newPod("a", nil)
	require.Empty(t, p.presence(t, image))
	m0, _, _ := h.fake.counts()
	_, err = p.pullOnly(t, image, "old", "secret")
	require.Error(t, err)
	ref, err := p.pullOnly(t, image, "alice", "pw")
	require.NoError(t, err)
	assert.Equal(t, id(1), ref)
	m1, _, _ := h.fake.counts()
	assert.Equal(t, 1, m1-m0, "only the refused credential reached the registry")
}
