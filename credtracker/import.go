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
	// entry needs verification. Pulls whose name cannot be parsed are
	// skipped and reported in the error, after the others were recorded.
	//
	// It writes the records in durable transactions of at most
	// ImportBatch images each, so that an import of every image of a node
	// holds a bounded part of it in memory. A failure or a crash part-way
	// leaves the images of the batches written before it imported and the
	// others as they were: the caller imports again (it is idempotent;
	// serve's switch-over does at its next start, as it marks itself done
	// only after Import returned).
	Import(pulls []ImportedPull, unknown []string, reason string) error
}

var _ Importer = (*tracker)(nil)

// ImportBatch is the most images Import writes in one transaction.
const ImportBatch = 512

func (t *tracker) Import(pulls []ImportedPull, unknown []string, reason string) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	now := t.clock.Now()
	var errs []error
	// What each image gets: its pulls, in order, and whether it is marked
	// of unknown origin.
	type change struct {
		pulls   []ImportedPull
		unknown bool
	}
	byRef := map[string]*change{}
	at := func(ref string) *change {
		c := byRef[ref]
		if c == nil {
			c = &change{}
			byRef[ref] = c
		}
		return c
	}
	for _, p := range pulls {
		if _, err := RepositoryName(p.Image); err != nil || p.ImageRef == "" {
			errs = append(errs, fmt.Errorf("imported pull of %q (%q): not a valid image name and ref", truncate(p.Image, 200), truncate(p.ImageRef, 80)))
			continue
		}
		c := at(p.ImageRef)
		c.pulls = append(c.pulls, p)
	}
	for _, ref := range unknown {
		if ref != "" {
			at(ref).unknown = true
		}
	}
	if reason == "" && len(unknown) > 0 {
		reason = "imported at " + now.UTC().Format("2006-01-02T15:04:05Z")
	}
	refs := sortedKeys(byRef)
	written, added := 0, 0
	for len(refs) > 0 {
		batch := refs[:min(len(refs), ImportBatch)]
		refs = refs[len(batch):]
		var put []*ImageRecord
		for _, ref := range batch {
			c := byRef[ref]
			cur := t.images.load(ref)
			next := cur
			for _, p := range c.pulls {
				repo, _ := RepositoryName(p.Image)
				if p.NodeAccessible {
					next = next.withPull(ref, repo, credential.Source{Kind: credential.SourceNode, Name: "imported"}, credential.Hash{}, now, t.maxEntries, t.maxAge)
				} else {
					next = next.withPulledUnknown(ref, repo, now)
				}
			}
			if c.unknown && (next == nil || next.UnknownOrigin == "") {
				if next == cur {
					next = cur.clone()
				}
				if next == nil {
					next = &ImageRecord{ImageRef: ref, Repositories: map[string]*RepositoryRecord{}}
				}
				next.UnknownOrigin = reason
				next.Updated = now
			}
			if next != cur {
				put = append(put, next)
			}
		}
		if len(put) == 0 {
			continue
		}
		n := 0
		for _, r := range put {
			if t.images.load(r.ImageRef) == nil {
				n++
			}
			t.images.store(r)
		}
		if n > 0 {
			added += n
			t.setMemoryCount(t.count.Add(int64(n)))
		}
		if err := t.write("import", func() error { return t.store.apply(put, nil, nil) }); err != nil {
			return errors.Join(append(errs, fmt.Errorf("failed to store %d imported records (%d stored before): %w", len(put), written, err))...)
		}
		written += len(put)
		t.setDiskCount(t.diskCount + n)
	}
	if written == 0 {
		return errors.Join(errs...)
	}
	t.logger.Info("Imported image records", "records", written, "unknownOrigin", len(unknown))
	t.compact("import")
	return errors.Join(errs...)
}
