package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// records runs `pullguard records -o json` and returns the secrets and
// service accounts recorded for repo (as "namespace/name").
func records(t *testing.T, root, repo string) (secrets, serviceAccounts []string, nodeAccessible bool) {
	t.Helper()
	out, err := exec.Command(h.binary, "records", "--root-dir", root, "-o", "json").Output()
	require.NoError(t, err)
	outputs = append(outputs, string(out))
	var doc struct {
		Records []struct {
			Repositories []struct {
				Name            string
				NodeAccessible  bool
				Secrets         []struct{ Namespace, Name string }
				ServiceAccounts []struct{ Namespace, Name string }
			}
		}
	}
	require.NoError(t, json.Unmarshal(out, &doc))
	for _, r := range doc.Records {
		for _, rr := range r.Repositories {
			if rr.Name != host()+"/"+repo {
				continue
			}
			nodeAccessible = nodeAccessible || rr.NodeAccessible
			for _, s := range rr.Secrets {
				secrets = append(secrets, s.Namespace+"/"+s.Name)
			}
			for _, sa := range rr.ServiceAccounts {
				serviceAccounts = append(serviceAccounts, sa.Namespace+"/"+sa.Name)
			}
		}
	}
	return secrets, serviceAccounts, nodeAccessible
}

// Scenario 4: a rotated secret (same object, new content) needs no
// registry request; a deleted secret's entries are pruned.
func TestSecretRotationAndDeletion(t *testing.T) {
	need(t)
	alice := newTenant("s4-alice")
	h.issuer.grant(alice.user, "s4/team-a/*", "pull")
	image := push(t, "s4/team-a/app", "v1", 401)
	root := newRoot(t)

	out := pullguard(t, root, secretYAML("team-a", "regcred", alice)+podYAML("team-a", "app-1", image, "IfNotPresent", "regcred"))
	require.Empty(t, out.Results[0].Error, out.Results[0].Message)

	// The password changes at the registry and in the Secret (same object).
	alice.rotate()
	m := mark(t)
	out = pullguard(t, root, secretYAML("team-a", "regcred", alice)+podYAML("team-a", "app-2", image, "IfNotPresent", "regcred"))
	r := out.Results[0]
	require.Empty(t, r.Error, r.Message)
	assert.False(t, r.Pulled)
	assert.Zero(t, registryRequests(t, m), "a rotated secret needs no registry request")
	secrets, _, _ := records(t, root, "s4/team-a/app")
	assert.Equal(t, []string{"team-a/regcred"}, secrets)

	// The Secret is deleted: the caller (a kubelet's informer) tells the tracker.
	tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: filepath.Join(root, podworkers.TrackerDir)}, nil)
	require.NoError(t, err)
	require.NoError(t, tr.ForgetSecret("team-a", "regcred", string(podworkers.DerivedUID("Secret", "team-a", "regcred"))))
	require.NoError(t, tr.Close())
	secrets, _, _ = records(t, root, "s4/team-a/app")
	assert.Empty(t, secrets, "the deleted secret's entry is gone")

	// A pod presenting that credential again must verify (and does).
	m = mark(t)
	out = pullguard(t, root, secretYAML("team-a", "regcred", alice)+podYAML("team-b", "never", image, "Never")+podYAML("team-a", "app-3", image, "IfNotPresent", "regcred"))
	assert.Equal(t, "ErrImageNeverPull", out.result(t, "team-b/never").Error, "the image is still protected")
	assert.True(t, out.result(t, "team-a/app-3").Pulled)
	assert.Equal(t, verifiedPresentManifests, trafficFor(t, m, "s4/team-a/app").manifestOK)
}
