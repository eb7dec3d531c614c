package imagemanager

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/guardedpull"
)

// RemoveImage removes an image from the runtime (image garbage collection)
// and then the tracker's record of it (guardedpull.Remove: its cost does not
// depend on the number of images; PruneRecords catches what it misses).
func (m *Manager) RemoveImage(ctx context.Context, imageRef string) error {
	id, err := guardedpull.Remove(ctx, m.images, m.tracker, &runtimeapi.ImageSpec{Image: imageRef}, m.clock.Now())
	if err != nil {
		return fmt.Errorf("failed to remove image %s: %w", imageRef, err)
	}
	if id != "" {
		m.logger.V(2).Info("Pruned the record of a removed image", "image", imageRef, "imageRef", id)
	}
	return nil
}

// PruneRecords lists the runtime's images and removes the tracker's
// records of images no longer present; call it after image garbage
// collection done by something else. Records written after the list was
// taken are kept.
func (m *Manager) PruneRecords(ctx context.Context) (int, error) {
	listedAt := m.clock.Now()
	imgs, err := guardedpull.Inventory(m.images).ListImages(ctx)
	if err != nil {
		return 0, err
	}
	n, err := m.tracker.PruneImages(imgs, listedAt)
	if err != nil {
		return n, fmt.Errorf("failed to prune image records: %w", err)
	}
	if n > 0 {
		m.logger.V(2).Info("Pruned records of removed images", "count", n)
	}
	return n, nil
}
