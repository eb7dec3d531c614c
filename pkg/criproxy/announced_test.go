package criproxy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/pkg/announce"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criproxy"
)

// TestAnnouncedNodeCredentials: a plugin that mints a token per call gave
// the kubelet a token serve never saw; the wrapper announced its keyed
// hash. A pull with it is recorded as the node's (another tenant's Never
// pod then gets the image, as under the kubelet's gate); a pull with a
// credential nobody announced for the image (a tenant's own secret, the
// token presented to another registry, an expired or refused
// announcement) stays the pod's.
func TestAnnouncedNodeCredentials(t *testing.T) {
	const (
		minted  = "minted-for-the-kubelet-7d0c2e"
		tenants = "tenant-own-secret-41b9aa"
	)
	tests := []struct {
		name     string
		pattern  string // the answer's auth key
		image    string
		pass     string // what the kubelet sends
		after    time.Duration
		mutate   func(t *testing.T, dir string)
		wantNode bool
	}{
		{name: "the minted token, announced", pattern: reg, image: reg + "/team-a/app:v1", pass: minted, wantNode: true},
		{name: "announced under a glob pattern", pattern: "127.0.0.*:5000", image: reg + "/team-a/app:v1", pass: minted, wantNode: true},
		{name: "a tenant's own secret", pattern: reg, image: reg + "/team-a/app:v1", pass: tenants},
		{name: "the token presented to another registry", pattern: reg, image: regB + "/team-a/app:v1", pass: minted},
		{name: "the announcement expired", pattern: reg, image: reg + "/team-a/app:v1", pass: minted, after: time.Hour + announce.DefaultGrace},
		{name: "the announcement is writable by others", pattern: reg, image: reg + "/team-a/app:v1", pass: minted,
			mutate: func(t *testing.T, dir string) {
				names, err := filepath.Glob(filepath.Join(dir, "*.json"))
				require.NoError(t, err)
				require.Len(t, names, 1)
				require.NoError(t, os.Chmod(names[0], 0o666))
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), announce.Dir)
			clock := testingclock.NewFakeClock(time.Now())
			w, err := announce.NewWriter(dir, announce.WithWriterClock(clock))
			require.NoError(t, err)
			require.NoError(t, w.Write(announce.Answer{
				Provider: "ecr-credential-provider", Image: reg + "/team-a/app", CacheKeyType: announce.ScopeRegistry,
				CacheDuration: time.Hour, Auth: map[string]credential.AuthConfig{tc.pattern: {Username: "AWS", Password: minted}},
			}))
			if tc.mutate != nil {
				tc.mutate(t, dir)
			}
			clock.Step(tc.after)
			logs := &syncBuffer{}
			logger := funcr.New(func(prefix, args string) { fmt.Fprintln(logs, prefix, args) }, funcr.Options{Verbosity: 10})
			board := announce.NewBoard(dir, announce.WithClock(clock), announce.WithLogger(logger))
			e := &nodeEnv{harness: newHarness(t, harnessConfig{serverOpts: []criproxy.Option{
				criproxy.WithAnnouncedCredentials(board), criproxy.WithLogger(logger),
			}}), logs: logs}

			e.fake.publish(t, tc.image, id(1), "AWS:"+tc.pass)
			_, err = e.newPod("team-a", nil).ensure(t, tc.image, "AWS", tc.pass)
			require.NoError(t, err, "the pull never fails for the announcements")
			assert.Equal(t, tc.wantNode, e.nodeAccessible(t, tc.image))
			if tc.wantNode {
				assert.Equal(t, id(1), e.newPod("team-b", nil).presence(t, tc.image), "another tenant's Never pod gets the node-accessible image")
				assert.Contains(t, e.logs.String(), "node (ecr-credential-provider)", "recorded under the plugin's name")
			} else {
				assert.Empty(t, e.newPod("team-b", nil).presence(t, tc.image), "another tenant's Never pod does not get a pod's image")
			}
			if tc.mutate != nil {
				assert.True(t, strings.Contains(e.logs.String(), "Refusing node credential announcements"), "the refusal is logged")
			}
			e.assertNoLeak(t, minted, tenants)
		})
	}
}
