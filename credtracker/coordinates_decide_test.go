package credtracker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/credtracker"
)

// TestCoordinatesNeverAdmitANeighbour: the coordinates a rotated secret
// or a service account is admitted by are kept once each in the names
// arena, which rebuilds move and start-up reassembles. A tenant who
// chooses coordinates next to another tenant's (fields split elsewhere,
// one character more or less, the longest names) and churns records to
// make the index rebuild, before and after a restart, is never admitted
// by the other tenant's coordinates; the owner always is.
func TestCoordinatesNeverAdmitANeighbour(t *testing.T) {
	long := strings.Repeat("n", 253)
	owners := []struct{ ns, name, uid string }{
		{"ab", "c", "u"},
		{"team-a", long, "uid-a"},
		{long[:63], "regcred", "uid-" + strings.Repeat("0", 32)},
	}
	neighbours := func(ns, name, uid string) [][3]string {
		out := [][3]string{
			{ns + name[:1], name[1:], uid}, // the split moved right
			{ns, name, uid + "0"},
			{ns, name, uid[:len(uid)-1]},
			{ns + "x", name, uid},
			{ns, name + "x", uid},
			{name, ns, uid},
		}
		if len(ns) > 1 {
			out = append(out, [3]string{ns[:len(ns)-1], ns[len(ns)-1:] + name, uid}) // the split moved left
		}
		var kept [][3]string
		for _, c := range out {
			if c[0] != "" && c[1] != "" {
				kept = append(kept, c)
			}
		}
		return kept
	}
	e := newEnv(t, credtracker.Config{})
	for i, o := range owners {
		image := fmt.Sprintf("registry.example/team-a/app%d:v1", i)
		ref := fmt.Sprintf("sha256:%064x", 0xa000+i)
		e.pull(image, ref, e.secretCred(reg, o.ns, o.name, o.uid, "alice", "pw-a"))
		e.pull(image, ref, e.saCred(reg, o.ns, o.name, o.uid, "tok-a"))
	}
	check := func(round string) {
		t.Helper()
		for i, o := range owners {
			image := fmt.Sprintf("registry.example/team-a/app%d:v1", i)
			ref := fmt.Sprintf("sha256:%064x", 0xa000+i)
			assert.Equal(t, decision(credtracker.UseImage, credtracker.ReasonSecretRotated),
				e.tr.Decide(ifNotPresent(image, ref, e.secretCred(reg, o.ns, o.name, o.uid, "alice", "rotated"))), "%s: owner %d's rotated secret", round, i)
			assert.Equal(t, decision(credtracker.UseImage, credtracker.ReasonServiceAccount),
				e.tr.Decide(ifNotPresent(image, ref, e.saCred(reg, o.ns, o.name, o.uid, "tok-new"))), "%s: owner %d's service account", round, i)
			for _, n := range neighbours(o.ns, o.name, o.uid) {
				assert.Equal(t, decision(credtracker.Pull, credtracker.ReasonNoMatch),
					e.tr.Decide(ifNotPresent(image, ref, e.secretCred(reg, n[0], n[1], n[2], "mallory", "pw-m"))), "%s: secret at %.50q next to owner %d", round, n, i)
				assert.Equal(t, decision(credtracker.Pull, credtracker.ReasonNoMatch),
					e.tr.Decide(ifNotPresent(image, ref, e.saCred(reg, n[0], n[1], n[2], "tok-m"))), "%s: service account at %.50q next to owner %d", round, n, i)
			}
		}
	}
	check("before churn")
	for round := range 3 {
		// Churn: other images pulled with many secrets, then forgotten,
		// which leaves garbage until the index compacts.
		for k := range 150 {
			ns := fmt.Sprintf("churn-%d-%d", round, k%10)
			e.pull(fmt.Sprintf("registry.example/churn/img%d:v1", k), fmt.Sprintf("sha256:%064x", 0xc0000+k),
				e.secretCred(reg, ns, "s"+strings.Repeat("x", k), fmt.Sprintf("u-%d", k), "c", "pw"))
		}
		for k := range 10 {
			require.NoError(t, e.tr.ForgetNamespace(fmt.Sprintf("churn-%d-%d", round, k)))
		}
		check(fmt.Sprintf("round %d", round))
		e.restart()
		check(fmt.Sprintf("round %d, restarted", round))
	}
}
