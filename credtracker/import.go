package credtracker

import (
	"errors"
	"fmt"

	"github.com/pullguard/pullguard/pkg/credential"
)

// ImportedPull is one image the node pulled under one name, learned from
// somewhere other than this tracker's own pulls: the kubelet's own records
// when a node switches to pullguard, or a pull whose outcome was lost.
type ImportedPull struct {
	// Image is the name it was pulled under (tag or digest optional).
	Image string
	// ImageRef is the runtime's image ID.
	ImageRef string
	// NodeAccessible is set when it was pulled with no credentials or with
	// node-level ones; otherwise it was pulled with a credential the
	// tracker does not know, and every pod must verify.
	NodeAccessible bool
}

// Importer adds what the node learned elsewhere to an enabled tracker.
type Importer interface {
	// Import records every pull in pulls (a name without a known
	// credential is never downgraded: an entry it already has stays), and
	// marks every image ref in unknown as of unknown origin with reason, so
	// that under every policy but NeverVerify each of its names without an
	// entry needs verification. It is one durable write. Pulls whose name
	// cannot be parsed are skipped and reported in the error, after the
	// others were recorded.
	Import(pulls []ImportedPull, unknown []string, reason string) error
}

var _ Importer = (*tracker)(nil)

func (t *tracker) Import(pulls []ImportedPull, unknown []string, reason string) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	now := t.clock.Now()
	changed := map[string]*ImageRecord{}
	load := func(ref string) *ImageRecord {
		if r, ok := changed[ref]; ok {
			return r
		}
		return t.images.load(ref)
	}
	var errs []error
	for _, p := range pulls {
		repo, err := RepositoryName(p.Image)
		if err != nil || p.ImageRef == "" {
			errs = append(errs, fmt.Errorf("imported pull of %q (%q): not a valid image name and ref", truncate(p.Image, 200), truncate(p.ImageRef, 80)))
			continue
		}
		cur := load(p.ImageRef)
		var next *ImageRecord
		if p.NodeAccessible {
			next = cur.withPull(p.ImageRef, repo, credential.Source{Kind: credential.SourceNode, Name: "imported"}, credential.Hash{}, now, t.maxEntries, t.maxAge)
		} else {
			next = cur.withPulledUnknown(p.ImageRef, repo, now)
		}
		if next != cur {
			changed[p.ImageRef] = next
		}
	}
	if reason == "" && len(unknown) > 0 {
		reason = "imported at " + now.UTC().Format("2006-01-02T15:04:05Z")
	}
	for _, ref := range unknown {
		if ref == "" {
			continue
		}
		cur := load(ref)
		if cur != nil && cur.UnknownOrigin != "" {
			continue
		}
		next := cur.clone()
		if next == nil {
			next = &ImageRecord{ImageRef: ref, Repositories: map[string]*RepositoryRecord{}}
		}
		next.UnknownOrigin = reason
		next.Updated = now
		changed[ref] = next
	}
	if len(changed) == 0 {
		return errors.Join(errs...)
	}
	put := make([]*ImageRecord, 0, len(changed))
	added := 0
	for _, ref := range sortedKeys(changed) {
		if t.images.load(ref) == nil {
			added++
		}
		t.images.store(changed[ref])
		put = append(put, changed[ref])
	}
	if added > 0 {
		t.setMemoryCount(t.count.Add(int64(added)))
	}
	if err := t.write("import", func() error { return t.store.apply(put, nil, nil) }); err != nil {
		return errors.Join(append(errs, fmt.Errorf("failed to store %d imported records: %w", len(put), err))...)
	}
	if added > 0 {
		t.setDiskCount(t.diskCount + added)
	}
	t.logger.Info("Imported image records", "records", len(put), "unknownOrigin", len(unknown))
	return errors.Join(errs...)
}
