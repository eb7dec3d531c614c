package criproxy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criproxy"
)

// TestSwitchOverKeepsTheStoreSize: the first start marks every present
// image of unknown origin, which rewrites the record of every image. The
// store file is no more than 10 % larger afterwards (one transaction for
// all of them grew it to more than twice its size), and every record is
// marked and kept, at the next start too.
func TestSwitchOverKeepsTheStoreSize(t *testing.T) {
	const images, repos = 2000, 10
	dir := t.TempDir()
	var imgs []credtracker.Image
	var pulls []credtracker.ImportedPull
	for i := range images {
		img := credtracker.Image{Ref: fmt.Sprintf("sha256:%064x", i+1)}
		for k := range repos {
			name := fmt.Sprintf("%s/team-%d/app-%d:v1", reg, k, i)
			img.Names = append(img.Names, name)
			pulls = append(pulls, credtracker.ImportedPull{Image: name, ImageRef: img.Ref, NodeAccessible: k%2 == 0})
		}
		imgs = append(imgs, img)
	}
	inv := credtracker.ImageInventoryFunc(func(context.Context) ([]credtracker.Image, error) { return imgs, nil })
	start := func() credtracker.Enabled {
		tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: dir}, inv)
		require.NoError(t, err)
		return tr
	}
	// The records of a node, as an import writes them.
	tr := start()
	require.NoError(t, tr.(credtracker.Importer).Import(pulls, nil, ""))
	require.NoError(t, tr.Close())
	store := filepath.Join(dir, credtracker.StoreFile)
	before, err := os.Stat(store)
	require.NoError(t, err)

	tr = start()
	res, err := criproxy.SwitchOver(context.Background(), tr.(credtracker.Importer), inv, t.TempDir(), t.TempDir(), criproxy.UnrecordedVerify, time.Unix(100, 0), testLogger())
	require.NoError(t, err)
	require.Equal(t, images, res.UnknownOrigin)
	require.NoError(t, tr.Close())
	after, err := os.Stat(store)
	require.NoError(t, err)
	t.Logf("store %d bytes before the switch-over, %d after", before.Size(), after.Size())
	assert.LessOrEqual(t, after.Size(), before.Size()+before.Size()/10)

	tr = start()
	defer tr.Close()
	recs := tr.Records()
	require.Len(t, recs, images)
	for _, r := range recs {
		assert.NotEmpty(t, r.UnknownOrigin, r.ImageRef)
		assert.Len(t, r.Repositories, repos, r.ImageRef)
	}
}
