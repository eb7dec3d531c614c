package guardedpull

import (
	"context"
	"fmt"

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
