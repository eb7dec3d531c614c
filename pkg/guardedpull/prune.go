package guardedpull

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// The prune rule, the same for both front ends: a record goes when its
// image is gone from the runtime, unless it was written after the runtime
// was asked (a pull that finished meanwhile keeps its record). Remove
// prunes one image's record as the image is removed (image garbage
// collection); Prune and PruneList prune from a full list of the images
// (images removed behind the front end's back, and what Remove could not
// prune). Each logs what it pruned with ctx's logger (klog.FromContext).

// ErrPrune is the class of the error Remove logs when the image is gone
// but its record's removal could not be stored. It is never the removal's
// error: the image is gone, so the removal is done (Remove returns nil;
// the kubelet's image garbage collection counts the image's space as freed
// and does not remove it again). The record grants nothing while the
// image is absent, and the next full prune (Prune, PruneList) removes it.
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
// to its image's ID with one ImageStatus. A record written at or after
// removedAt is kept. It returns the runtime's error only (its gRPC status
// kept): a record whose removal could not be stored is logged, as an error
// wrapping ErrPrune, and the removal is done.
func Remove(ctx context.Context, images ImageRemover, tracker credtracker.Pruner, spec *runtimeapi.ImageSpec, removedAt time.Time) error {
	id := spec.GetImage()
	if !criruntime.IsImageID(id) {
		st, err := images.ImageStatus(ctx, spec, false)
		if err != nil {
			return fmt.Errorf("failed to find the image to remove: %w", err)
		}
		id = st.GetImage().GetId() // "" if absent: nothing to prune
	}
	if err := images.RemoveImage(ctx, spec); err != nil {
		return err
	}
	if id == "" {
		return nil
	}
	logger := klog.FromContext(ctx)
	removed, err := tracker.PruneImage(id, removedAt)
	switch {
	case err != nil:
		logger.Error(fmt.Errorf("%w: %w", ErrPrune, err), "Failed to prune the record of a removed image; the next full prune removes it", "image", spec.GetImage(), "imageRef", id)
	case removed:
		logger.V(2).Info("Pruned the record of a removed image", "image", spec.GetImage(), "imageRef", id)
	}
	return nil
}

// Prune lists images and removes the tracker's records of images no
// longer present (PruneList). The time of the list is read from clk before
// the list is asked for, so a pull that finishes while the list is taken
// keeps its record. It returns how many records went.
func Prune(ctx context.Context, images ImageLister, tracker credtracker.Pruner, clk clock.PassiveClock) (int, error) {
	listedAt := clk.Now()
	list, err := images.ListImages(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("failed to list images: %w", err)
	}
	return PruneList(ctx, tracker, list, listedAt)
}

// PruneList removes the tracker's records of images missing from list, a
// runtime's full image list asked for at listedAt; records written at or
// after listedAt are kept. It returns how many records went.
func PruneList(ctx context.Context, tracker credtracker.Pruner, list []*runtimeapi.Image, listedAt time.Time) (int, error) {
	n, err := tracker.PruneImages(Images(list), listedAt)
	if err != nil {
		return n, fmt.Errorf("failed to prune the records of images that are gone: %w", err)
	}
	if n > 0 {
		klog.FromContext(ctx).V(2).Info("Pruned the records of images that are gone", "records", n)
	}
	return n, nil
}
