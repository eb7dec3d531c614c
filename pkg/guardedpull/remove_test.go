package guardedpull_test

import (
	"context"
	"errors"
	"strings"
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

// remover is a runtime's image store by ID, with its names; it counts the
// ImageStatus calls a removal makes (it cannot list: a removal does not).
type remover struct {
	images    map[string][]string // ID → names
	statuses  int
	removeErr error
}

func (r *remover) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	r.statuses++
	for id, names := range r.images {
		for _, n := range names {
			if n == spec.GetImage() {
				return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: id, RepoTags: names}}, nil
			}
		}
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (r *remover) RemoveImage(_ context.Context, spec *runtimeapi.ImageSpec) error {
	if r.removeErr != nil {
		return r.removeErr
	}
	delete(r.images, spec.GetImage())
	for id, names := range r.images {
		for _, n := range names {
			if n == spec.GetImage() {
				delete(r.images, id)
			}
		}
	}
	return nil
}

// pruner is the tracker's records by image ref, with the time each was
// written.
type pruner struct {
	credtracker.Pruner
	written map[string]time.Time
	err     error
}

func (p *pruner) PruneImage(ref string, removedAt time.Time) (bool, error) {
	w, ok := p.written[ref]
	if !ok || !w.Before(removedAt) {
		return false, nil
	}
	delete(p.written, ref)
	return true, p.err
}

// TestRemove: a removal by image ID (the kubelet's image GC) asks the
// runtime nothing but the removal and prunes that one record; a name is
// resolved with one ImageStatus; a record written after the removal was
// asked stays; a failed removal prunes nothing and keeps the runtime's
// code; a prune that cannot be stored is ErrPrune, the image gone.
func TestRemove(t *testing.T) {
	idA, idB := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	t0 := time.Unix(1_800_000_000, 0)
	errStore := errors.New("disk full")
	tests := []struct {
		name         string
		image        string
		written      time.Time // of idA's record
		removeErr    error
		pruneErr     error
		wantID       string
		wantErr      error
		wantCode     codes.Code
		wantStatuses int
		wantRecords  []string
	}{
		{name: "by image ID", image: idA, written: t0, wantID: idA, wantRecords: []string{idB}},
		{name: "by name", image: "registry.example/team-a/app:v1", written: t0, wantID: idA, wantStatuses: 1, wantRecords: []string{idB}},
		{name: "an absent name", image: "registry.example/team-a/gone:v1", written: t0, wantStatuses: 1, wantRecords: []string{idA, idB}},
		{name: "pulled again while removing", image: idA, written: t0.Add(time.Second), wantRecords: []string{idA, idB}},
		{name: "removal refused", image: idA, written: t0, removeErr: status.Error(codes.FailedPrecondition, "image is in use"), wantCode: codes.FailedPrecondition, wantRecords: []string{idA, idB}},
		{name: "prune not stored", image: idA, written: t0, pruneErr: errStore, wantID: idA, wantErr: guardedpull.ErrPrune, wantRecords: []string{idB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &remover{images: map[string][]string{idA: {"registry.example/team-a/app:v1"}, idB: {"registry.example/team-b/app:v1"}}, removeErr: tt.removeErr}
			p := &pruner{written: map[string]time.Time{idA: tt.written, idB: t0}, err: tt.pruneErr}
			id, err := guardedpull.Remove(context.Background(), r, p, &runtimeapi.ImageSpec{Image: tt.image}, t0.Add(time.Second))
			switch {
			case tt.wantErr != nil:
				require.ErrorIs(t, err, tt.wantErr)
				assert.ErrorIs(t, err, errStore)
			case tt.wantCode != codes.OK:
				require.Error(t, err)
				assert.Equal(t, tt.wantCode, status.Code(err))
			default:
				require.NoError(t, err)
			}
			assert.Equal(t, tt.wantID, id)
			assert.Equal(t, tt.wantStatuses, r.statuses, "ImageStatus calls")
			got := []string{}
			for ref := range p.written {
				got = append(got, ref)
			}
			assert.ElementsMatch(t, tt.wantRecords, got)
		})
	}
}
