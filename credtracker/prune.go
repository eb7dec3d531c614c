package credtracker

import (
	"fmt"
	"time"
)

func (t *tracker) PruneImages(present []Image, listedAt time.Time) (int, error) {
	keep := make(map[string]struct{}, len(present))
	for _, img := range present {
		keep[img.Ref] = struct{}{}
	}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	var del []string
	listed := unixNano(listedAt)
	t.images.each(func(g groupView) {
		if g.updated() >= listed {
			return
		}
		if ref := g.refString(); !keepRef(keep, ref) {
			del = append(del, ref)
		}
	})
	if len(del) == 0 {
		return 0, nil
	}
	for _, ref := range del {
		t.images.delete(ref)
	}
	t.setMemoryCount(t.count.Add(-int64(len(del))))
	if err := t.write("prune", func() error { return t.store.apply(nil, del, nil) }); err != nil {
		return len(del), fmt.Errorf("failed to remove %d records of removed images from the store: %w", len(del), err)
	}
	t.setDiskCount(t.diskCount - len(del))
	t.logger.V(2).Info("Pruned records of images no longer present", "count", len(del))
	return len(del), nil
}

func (t *tracker) PruneImage(imageRef string, removedAt time.Time) (bool, error) {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	g, ok := t.images.loadGroup(imageRef)
	if !ok || g.updated() >= unixNano(removedAt) {
		return false, nil
	}
	t.images.delete(imageRef)
	t.setMemoryCount(t.count.Add(-1))
	if err := t.write("prune", func() error { return t.store.apply(nil, []string{imageRef}, nil) }); err != nil {
		return true, fmt.Errorf("failed to remove the record of removed image %s from the store: %w", imageRef, err)
	}
	t.setDiskCount(t.diskCount - 1)
	t.logger.V(2).Info("Pruned the record of a removed image", "imageRef", imageRef)
	return true, nil
}

func (t *tracker) ForgetSecret(namespace, name, uid string) error {
	return t.forget(fmt.Sprintf("secret %s/%s", namespace, name),
		func(e SecretEntry) bool { return e.Namespace == namespace && e.Name == name && e.UID == uid },
		func(ServiceAccountEntry) bool { return false })
}

func (t *tracker) ForgetServiceAccount(namespace, name, uid string) error {
	return t.forget(fmt.Sprintf("serviceaccount %s/%s", namespace, name),
		func(SecretEntry) bool { return false },
		func(e ServiceAccountEntry) bool { return e.Namespace == namespace && e.Name == name && e.UID == uid })
}

func (t *tracker) ForgetNamespace(namespace string) error {
	return t.forget("namespace "+namespace,
		func(e SecretEntry) bool { return e.Namespace == namespace },
		func(e ServiceAccountEntry) bool { return e.Namespace == namespace })
}

// forget removes matching entries from every record, in one transaction.
// The records themselves stay: the images were still pulled with
// credentials, so pods must still verify.
func (t *tracker) forget(what string, dropSecret func(SecretEntry) bool, dropSA func(ServiceAccountEntry) bool) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	now := t.clock.Now()
	var changed []*ImageRecord
	for _, r := range t.images.all() {
		if next, ok := r.without(dropSecret, dropSA, now); ok {
			changed = append(changed, next)
		}
	}
	for _, r := range changed {
		t.images.store(r)
	}
	if err := t.write("forget", func() error { return t.store.apply(changed, nil, nil) }); err != nil {
		return fmt.Errorf("failed to store records after forgetting %s: %w", what, err)
	}
	t.logger.V(2).Info("Forgot credential entries", "of", what, "records", len(changed))
	return nil
}

func keepRef(keep map[string]struct{}, ref string) bool {
	_, ok := keep[ref]
	return ok
}
