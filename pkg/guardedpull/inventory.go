package guardedpull

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// ImageLister is the part of a CRI image service an inventory uses.
type ImageLister interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
}

// Inventory adapts a CRI image service (the node's runtime, or the backend
// of `pullguard serve`) to the tracker's ImageInventory: each image's ID
// with its repo tags and repo digests. It lives here, beside the pull both
// front ends make, and not in pkg/criruntime, so that the runtime package
// does not import the tracker above it.
func Inventory(images ImageLister) credtracker.ImageInventory {
	return credtracker.ImageInventoryFunc(func(ctx context.Context) ([]credtracker.Image, error) {
		list, err := images.ListImages(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("failed to list images: %w", err)
		}
		return Images(list), nil
	})
}

// Images returns a runtime's image list as the tracker sees it: each
// image's ID with its names (repo tags, then repo digests).
func Images(list []*runtimeapi.Image) []credtracker.Image {
	out := make([]credtracker.Image, 0, len(list))
	for _, img := range list {
		out = append(out, credtracker.Image{Ref: img.GetId(), Names: criruntime.ImageNames(img)})
	}
	return out
}

// ErrPrune says that an image was removed but its record's removal could
// not be stored (the record grants nothing while the image is absent, and
// the next full prune retries).
var ErrPrune = errors.New("the removed image's record could not be pruned")

// ImageRemover is the part of a CRI image service a removal uses.
type ImageRemover interface {
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
	RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error
}

// Remove removes an image through the runtime (image garbage collection)
// and then the tracker's record of that image, at a cost that does not
// depend on how many images or records the node has: the kubelet removes
// by image ID, which is the record's key; any other name is first resolved
// to its image's ID with one ImageStatus. A record written after removedAt
// (a pull of the image that finished meanwhile) is kept. A full prune
// (Tracker.PruneImages) catches what this misses: an image removed behind
// the front end's back, or a record whose removal failed to be stored.
// It returns the image ID whose record went ("" if none), and an error: the
// runtime's (its gRPC status kept), or one wrapping ErrPrune when the image
// is gone but its record's removal could not be stored.
func Remove(ctx context.Context, images ImageRemover, tracker credtracker.Pruner, spec *runtimeapi.ImageSpec, removedAt time.Time) (string, error) {
	id := spec.GetImage()
	if !criruntime.IsImageID(id) {
		st, err := images.ImageStatus(ctx, spec, false)
		if err != nil {
			return "", fmt.Errorf("failed to find the image to remove: %w", err)
		}
		id = st.GetImage().GetId() // "" if absent: nothing to prune
	}
	if err := images.RemoveImage(ctx, spec); err != nil {
		return "", err
	}
	if id == "" {
		return "", nil
	}
	removed, err := tracker.PruneImage(id, removedAt)
	if err != nil {
		return id, fmt.Errorf("%w: %w", ErrPrune, err)
	}
	if !removed {
		return "", nil
	}
	return id, nil
}
