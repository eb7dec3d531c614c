package guardedpull_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// lister answers ListImages with its images, or its error; during, if
// set, runs while the list is taken.
type lister struct {
	images []*runtimeapi.Image
	err    error
	during func()
}

func (l lister) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	if l.during != nil {
		l.during()
	}
	return l.images, l.err
}

// TestInventory: the tracker sees each image's ID with its repo tags, then
// its repo digests; a runtime that cannot list is an error, never an empty
// list.
func TestInventory(t *testing.T) {
	errDown := errors.New("runtime down")
	tests := []struct {
		name    string
		lister  lister
		want    []credtracker.Image
		wantErr error
	}{
		{name: "no images", lister: lister{}, want: []credtracker.Image{}},
		{
			name: "tags then digests",
			lister: lister{images: []*runtimeapi.Image{
				{Id: id, RepoTags: []string{image}, RepoDigests: []string{"registry.example/team-a/app@sha256:" + id[7:]}},
				{Id: "sha256:" + id[8:] + "8"},
			}},
			want: []credtracker.Image{
				{Ref: id, Names: []string{image, "registry.example/team-a/app@sha256:" + id[7:]}},
				{Ref: "sha256:" + id[8:] + "8", Names: []string{}},
			},
		},
		{name: "runtime cannot list", lister: lister{err: errDown}, wantErr: errDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := guardedpull.Inventory(tt.lister).ListImages(context.Background())
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
