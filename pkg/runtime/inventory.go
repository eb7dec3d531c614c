package runtime

import (
	"context"
	"fmt"

	internalapi "k8s.io/cri-api/pkg/apis"

	"github.com/pullguard/pullguard/credtracker"
)

// Inventory adapts a CRI image service (the node's runtime, or the backend
// of `pullguard serve`) to the tracker's ImageInventory: each image's ID
// with its repo tags and repo digests.
func Inventory(images internalapi.ImageManagerService) credtracker.ImageInventory {
	return credtracker.ImageInventoryFunc(func(ctx context.Context) ([]credtracker.Image, error) {
		list, err := images.ListImages(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("failed to list images: %w", err)
		}
		out := make([]credtracker.Image, 0, len(list))
		for _, img := range list {
			out = append(out, credtracker.Image{Ref: img.GetId(), Names: ImageNames(img)})
		}
		return out, nil
	})
}
