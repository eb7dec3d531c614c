package credtracker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
)

// TestStartupLoadsEveryRecordAsWritten: the start-up path (records encoded
// for the index as the workers decode them, then installed at once) gives
// back every record exactly as it was written, for records of every shape
// (no repository, several, unknown origin, secrets and service accounts,
// refs that are not digests), and finds each of their entries.
func TestStartupLoadsEveryRecordAsWritten(t *testing.T) {
	dir := t.TempDir()
	h, _, err := credential.LoadOrCreateHasher(filepath.Join(dir, HashKeyFile))
	require.NoError(t, err)
	s, err := newBenchStore(dir, h)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(11, 13))
	repos := []string{"registry.example/a/app", "registry.example/b/app", "docker.io/library/alpine", "registry.example:5000/c/d/e"}
	var want []ImageRecord
	for i := range 5000 { // more than one worker's share, more than one chunk
		ref := fmt.Sprintf("sha256:%064x", rng.Uint64())
		if i%97 == 0 {
			ref = fmt.Sprintf("sha512:%x", i) // not a sha256 digest: kept as it is
		}
		r := randomRecord(rng, ref, repos)
		require.NoError(t, s.putRecord(r, ""))
		want = append(want, *r)
	}
	require.NoError(t, s.close())

	trI, err := New(context.Background(), Config{Dir: dir}, nil, WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	tr := trI.(*tracker)
	t.Cleanup(func() { tr.Close() })

	slices.SortFunc(want, func(a, b ImageRecord) int { return strings.Compare(a.ImageRef, b.ImageRef) })
	require.Equal(t, want, tr.Records())
	for _, r := range want {
		for _, repo := range repos {
			v, ok := tr.images.loadRepository(r.ImageRef, repo)
			rr, recorded := r.Repositories[repo]
			require.Equal(t, recorded, ok, "%s under %s", r.ImageRef, repo)
			if ok {
				assert.Equal(t, rr.NodeAccessible, v.nodeAccessible())
				assert.Equal(t, len(rr.Secrets), v.secrets())
			}
		}
	}
}
