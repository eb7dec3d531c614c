package guardedpull_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

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

func (p *pruner) PruneImages(present []credtracker.Image, listedAt time.Time) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n := 0
	for ref, w := range p.written {
		if w.Before(listedAt) && !slices.ContainsFunc(present, func(img credtracker.Image) bool { return img.Ref == ref }) {
			delete(p.written, ref)
			n++
		}
	}
	return n, nil
}

func (p *pruner) refs() []string {
	out := []string{}
	for ref := range p.written {
		out = append(out, ref)
	}
	return out
}

// bufferedLogger logs to the test and keeps what it logged.
func bufferedLogger(t *testing.T) (context.Context, func() ktesting.Log) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(2)))
	return klog.NewContext(context.Background(), logger), func() ktesting.Log {
		return logger.GetSink().(ktesting.Underlier).GetBuffer().Data()
	}
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
// code; a prune that cannot be stored is logged as ErrPrune and the
// removal is done (the image is gone).
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
		wantPruned   bool // logged as pruned
		wantErrPrune bool // logged as ErrPrune
		wantCode     codes.Code
		wantStatuses int
		wantRecords  []string
	}{
		{name: "by image ID", image: idA, written: t0, wantPruned: true, wantRecords: []string{idB}},
		{name: "by name", image: "registry.example/team-a/app:v1", written: t0, wantPruned: true, wantStatuses: 1, wantRecords: []string{idB}},
		{name: "an absent name", image: "registry.example/team-a/gone:v1", written: t0, wantStatuses: 1, wantRecords: []string{idA, idB}},
		{name: "pulled again while removing", image: idA, written: t0.Add(time.Second), wantRecords: []string{idA, idB}},
		{name: "removal refused", image: idA, written: t0, removeErr: status.Error(codes.FailedPrecondition, "image is in use"), wantCode: codes.FailedPrecondition, wantRecords: []string{idA, idB}},
		{name: "prune not stored", image: idA, written: t0, pruneErr: errStore, wantErrPrune: true, wantRecords: []string{idB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &remover{images: map[string][]string{idA: {"registry.example/team-a/app:v1"}, idB: {"registry.example/team-b/app:v1"}}, removeErr: tt.removeErr}
			p := &pruner{written: map[string]time.Time{idA: tt.written, idB: t0}, err: tt.pruneErr}
			ctx, logged := bufferedLogger(t)
			err := guardedpull.Remove(ctx, r, p, &runtimeapi.ImageSpec{Image: tt.image}, t0.Add(time.Second))
			if tt.wantCode != codes.OK {
				require.Error(t, err)
				assert.Equal(t, tt.wantCode, status.Code(err))
			} else {
				require.NoError(t, err, "the image is gone: the removal is done")
			}
			var pruned, errPrune bool
			for _, e := range logged() {
				pruned = pruned || e.Message == "Pruned the record of a removed image"
				if errors.Is(e.Err, guardedpull.ErrPrune) {
					errPrune = true
					assert.ErrorIs(t, e.Err, errStore, "the store's error is logged")
				}
			}
			assert.Equal(t, tt.wantPruned, pruned, "logged as pruned")
			assert.Equal(t, tt.wantErrPrune, errPrune, "logged as ErrPrune")
			assert.Equal(t, tt.wantStatuses, r.statuses, "ImageStatus calls")
			got := p.refs()
			assert.ElementsMatch(t, tt.wantRecords, got)
		})
	}
}

// TestPrune: the full prune removes the records of images missing from
// the runtime's list, keeps those of listed images and a record written
// while the list was taken (its time is read before the list is asked
// for), and fails with the runtime's or the store's error, naming what
// failed.
func TestPrune(t *testing.T) {
	idA, idB, idC := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64), "sha256:"+strings.Repeat("c", 64)
	t0 := time.Unix(1_800_000_000, 0)
	errList, errStore := status.Error(codes.Unavailable, "connection refused"), errors.New("disk full")
	tests := []struct {
		name        string
		listErr     error
		pruneErr    error
		wantN       int
		wantErr     error
		wantText    string
		wantRecords []string
	}{
		{name: "gone images' records go", wantN: 1, wantRecords: []string{idA, idC}},
		{name: "the runtime cannot list", listErr: errList, wantErr: errList, wantText: "failed to list images", wantRecords: []string{idA, idB, idC}},
		{name: "the store cannot prune", pruneErr: errStore, wantErr: errStore, wantText: "failed to prune the records of images that are gone", wantRecords: []string{idA, idB, idC}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			p := &pruner{written: map[string]time.Time{idA: t0.Add(-time.Second), idB: t0.Add(-time.Second)}, err: tt.pruneErr}
			l := lister{images: []*runtimeapi.Image{{Id: idA, RepoTags: []string{"registry.example/team-a/app:v1"}}}, err: tt.listErr, during: func() {
				// A pull of idC finishes, and is recorded, while the list is taken.
				clk.Step(time.Second)
				p.written[idC] = clk.Now()
				clk.Step(time.Second)
			}}
			ctx, logged := bufferedLogger(t)
			n, err := guardedpull.Prune(ctx, l, p, clk)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.ErrorContains(t, err, tt.wantText)
			} else {
				require.NoError(t, err)
				require.NotEmpty(t, logged(), "what went is logged")
				assert.Equal(t, "Pruned the records of images that are gone", logged()[0].Message)
			}
			assert.Equal(t, tt.wantN, n)
			assert.ElementsMatch(t, tt.wantRecords, p.refs())
		})
	}
}
