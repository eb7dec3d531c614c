package pulltest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// OtherImage is an image beside Image, present and recorded in every removal
// case, which no removal or prune may touch.
const (
	OtherImage = Host + "/team-b/other:v1"
	OtherID    = "sha256:0707070707070707070707070707070707070707070707070707070707070707"
)

// RemoveCase is one removal of Image (image garbage collection) and what
// both front ends must make of it.
type RemoveCase struct {
	Name string
	// By is what the removal names: ID (the kubelet's GC) or Image.
	By string
	// StoreFails makes the tracker fail to store the prune of Image's
	// record (its full prune still works).
	StoreFails bool
	// RuntimeRefuses makes the runtime refuse the removal (an image in
	// use).
	RuntimeRefuses bool

	// WantErr: the removal fails, with the runtime's code. Only the
	// runtime's refusal fails it: once the image is gone, the removal is
	// done (guardedpull.ErrPrune is logged, never returned).
	WantErr bool
	// WantRecord: Image's record is still there after the removal (the
	// next full prune removes it if the image is gone).
	WantRecord bool
}

// RemoveCases are the removals both front ends must treat alike.
var RemoveCases = []RemoveCase{
	{Name: "by image ID, as the kubelet's image GC removes", By: ID},
	{Name: "by name", By: Image},
	{Name: "the record's prune is not stored: the image is gone, the removal done", By: ID, StoreFails: true, WantRecord: true},
	{Name: "the runtime refuses: nothing pruned", By: ID, RuntimeRefuses: true, WantErr: true, WantRecord: true},
}

// Remover is a front end's removal of an image and its full prune (a
// list of the runtime's images, then the prune of the records of images
// not in it).
type Remover struct {
	Remove func(ctx context.Context, image string) error
	Prune  func(ctx context.Context) (int, error)
}

// failingPrune is a tracker that cannot store the prune of one image's
// record.
type failingPrune struct{ credtracker.Enabled }

var errStore = errors.New("failed to write the store: no space left on device")

func (failingPrune) PruneImage(string, time.Time) (bool, error) { return false, errStore }

// RunRemove runs every case of RemoveCases against the front end fe
// builds: Image and OtherImage are present and recorded; Image is removed;
// then a full prune runs with a tracker that stores it.
func RunRemove(t *testing.T, fe func(t *testing.T, env Env) Remover) {
	for _, tc := range RemoveCases {
		t.Run(tc.Name, func(t *testing.T) {
			ctx := context.Background()
			rt := newRuntime(Store, nil)
			preload(rt)
			rt.Add(&runtimeapi.Image{Id: OtherID, RepoTags: []string{OtherImage}, Size: 4096})
			if tc.RuntimeRefuses {
				rt.FailRemove(status.Error(codes.FailedPrecondition, "image is in use by a container"))
			}
			tr, err := credtracker.New(ctx, credtracker.Config{Dir: t.TempDir()}, guardedpull.Inventory(rt))
			require.NoError(t, err)
			t.Cleanup(func() { _ = tr.Close() })
			imp, ok := tr.(credtracker.Importer)
			require.True(t, ok, "the tracker imports pulls")
			require.NoError(t, imp.Import([]credtracker.ImportedPull{{Image: Image, ImageRef: ID}, {Image: OtherImage, ImageRef: OtherID}}, nil, ""))
			env := Env{Runtime: rt, Tracker: tr}
			if tc.StoreFails {
				env.Tracker = failingPrune{tr}
			}
			rm := fe(t, env)

			err = rm.Remove(ctx, tc.By)
			if tc.WantErr {
				require.Error(t, err)
				assert.Equal(t, codes.FailedPrecondition, status.Code(err), "the runtime's code: %v", err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.RuntimeRefuses, rt.Find(ID) != nil, "the image is present")
			assert.Equal(t, tc.WantRecord, recorded(tr, ID), "the record after the removal")
			assert.True(t, recorded(tr, OtherID), "the other image's record stays")

			_, err = fe(t, Env{Runtime: rt, Tracker: tr}).Prune(ctx)
			require.NoError(t, err)
			assert.Equal(t, tc.RuntimeRefuses, recorded(tr, ID), "the record after a full prune: kept only while its image is present")
			assert.True(t, recorded(tr, OtherID), "the other image's record stays")
		})
	}
}

// recorded says whether tr holds a record of the image id.
func recorded(tr credtracker.Tracker, id string) bool {
	for _, rec := range tr.Records() {
		if rec.ImageRef == id {
			return true
		}
	}
	return false
}
