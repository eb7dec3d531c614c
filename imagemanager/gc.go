package imagemanager

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// RemoveImage removes an image from the runtime (image garbage collection)
// and then the tracker's record of it, as serve does (guardedpull.Remove:
// its cost does not depend on the number of images). Only the runtime's
// error fails it: a record whose removal could not be stored is logged
// (guardedpull.ErrPrune), and PruneRecords removes it.
func (m *Manager) RemoveImage(ctx context.Context, imageRef string) error {
	if err := guardedpull.Remove(klog.NewContext(ctx, m.logger), m.images, m.tracker, &runtimeapi.ImageSpec{Image: imageRef}, m.clock.Now()); err != nil {
		return fmt.Errorf("failed to remove image %s: %w", imageRef, err)
	}
	return nil
}

// PruneRecords lists the runtime's images and removes the tracker's
// records of images no longer present (guardedpull.Prune); call it after
// image garbage collection done by something else. Records written after
// the list was taken are kept.
func (m *Manager) PruneRecords(ctx context.Context) (int, error) {
	return guardedpull.Prune(klog.NewContext(ctx, m.logger), m.images, m.tracker, m.clock)
}
