package criruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/pullguard/pullguard/internal/durable"
)

// The persisted image index, a versioned object so it can be inspected and
// migrated.
const (
	indexAPIVersion = "runtime.pullguard.io/v1alpha1"
	indexKind       = "ImageIndex"
	indexFile       = "images.json"
)

// target is what a name resolves to: the top-level manifest or index a pull
// resolved (the map key), the platform manifest chosen from it, and that
// manifest's config and layers. All of its blobs are in the content store.
type target struct {
	MediaType string    `json:"mediaType"`
	Manifest  v1.Hash   `json:"manifest"`
	Config    v1.Hash   `json:"config"`
	Layers    []v1.Hash `json:"layers"`
	Size      uint64    `json:"size"`
	User      string    `json:"user,omitempty"`
	// Recovered marks a target rebuilt from the content store after the
	// index was lost: it has no names and is kept without them.
	Recovered bool `json:"recovered,omitempty"`
}

// blobs lists every blob the target needs, top-level digest first.
func (t *target) blobs(top v1.Hash) []v1.Hash {
	out := append(make([]v1.Hash, 0, len(t.Layers)+3), top, t.Manifest, t.Config)
	return append(out, t.Layers...)
}

// imageIndex maps canonical names to targets. Images (CRI's unit) are the
// targets grouped by config digest, which is the image ID.
type imageIndex struct {
	APIVersion string              `json:"apiVersion"`
	Kind       string              `json:"kind"`
	Names      map[string]v1.Hash  `json:"names"`
	Targets    map[v1.Hash]*target `json:"targets"`

	// byID and list are derived from Names and Targets by build, so readers
	// never group names on the hot path. An index is not modified once
	// built: writers clone it, change the clone, build and publish it.
	byID map[v1.Hash]*image
	list []*image
}

func newImageIndex() *imageIndex {
	return &imageIndex{
		APIVersion: indexAPIVersion,
		Kind:       indexKind,
		Names:      map[string]v1.Hash{},
		Targets:    map[v1.Hash]*target{},
	}
}

// decodeImageIndex parses and checks a persisted index.
func decodeImageIndex(b []byte) (*imageIndex, error) {
	idx := newImageIndex()
	if err := json.Unmarshal(b, idx); err != nil {
		return nil, fmt.Errorf("failed to decode image index: %w", err)
	}
	if idx.APIVersion != indexAPIVersion || idx.Kind != indexKind {
		return nil, fmt.Errorf("unsupported image index %s/%s", idx.APIVersion, idx.Kind)
	}
	if idx.Names == nil {
		idx.Names = map[string]v1.Hash{}
	}
	if idx.Targets == nil {
		idx.Targets = map[v1.Hash]*target{}
	}
	for n, top := range idx.Names {
		if _, ok := idx.Targets[top]; !ok {
			return nil, fmt.Errorf("image index names %q with unknown target %s", n, top)
		}
	}
	for top, t := range idx.Targets {
		if t == nil {
			return nil, fmt.Errorf("image index has an empty target %s", top)
		}
	}
	idx.build()
	return idx, nil
}

// loadImageIndex reads dir's index; a missing file is an empty index.
func loadImageIndex(dir string) (*imageIndex, error) {
	b, err := os.ReadFile(filepath.Join(dir, indexFile))
	if errors.Is(err, fs.ErrNotExist) {
		idx := newImageIndex()
		idx.build()
		return idx, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read image index: %w", err)
	}
	return decodeImageIndex(b)
}

// save writes the index atomically and durably (internal/durable: temp
// file, fsync, rename, fsync of the directory). A crash leaves the old
// index or the new one, never a mix.
func (idx *imageIndex) save(dir string) error {
	b, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("failed to encode image index: %w", err)
	}
	if err := durable.WriteFile(filepath.Join(dir, indexFile), b, 0o600); err != nil {
		return fmt.Errorf("failed to write image index: %w", err)
	}
	return nil
}

// clone returns a deep enough copy for a copy-on-write update: maps are new,
// targets are shared (they are never mutated once stored).
func (idx *imageIndex) clone() *imageIndex {
	c := newImageIndex()
	for k, v := range idx.Names {
		c.Names[k] = v
	}
	for k, v := range idx.Targets {
		c.Targets[k] = v
	}
	c.byID, c.list = idx.byID, idx.list // stale once c changes; build refreshes them
	return c
}

// lookup finds an image by image ID or by canonical name.
func (idx *imageIndex) lookup(idOrName string) *image {
	if top, ok := idx.Names[idOrName]; ok {
		return idx.byID[idx.Targets[top].Config]
	}
	if IsImageID(idOrName) {
		h, _ := v1.NewHash(idOrName)
		return idx.byID[h]
	}
	return nil
}

// image groups everything the index knows about image ID id.
type image struct {
	id          v1.Hash
	repoTags    []string
	repoDigests []string
	size        uint64
	user        string
}

// build derives the per-image view from Names and Targets.
func (idx *imageIndex) build() {
	byID := map[v1.Hash]*image{}
	for n, top := range idx.Names {
		t := idx.Targets[top]
		img, ok := byID[t.Config]
		if !ok {
			img = &image{id: t.Config, user: t.User}
			byID[t.Config] = img
		}
		img.size = max(img.size, t.Size)
		if isDigestName(n) {
			img.repoDigests = append(img.repoDigests, n)
		} else {
			img.repoTags = append(img.repoTags, n)
		}
	}
	for _, t := range idx.Targets {
		if _, ok := byID[t.Config]; !ok && t.Recovered {
			byID[t.Config] = &image{id: t.Config, user: t.User, size: t.Size}
		}
	}
	list := make([]*image, 0, len(byID))
	for _, img := range byID {
		sort.Strings(img.repoTags)
		sort.Strings(img.repoDigests)
		list = append(list, img)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].id.String() < list[j].id.String() })
	idx.byID, idx.list = byID, list
}

// referenced returns the set of blobs some target needs.
func (idx *imageIndex) referenced() map[v1.Hash]bool {
	refs := map[v1.Hash]bool{}
	for top, t := range idx.Targets {
		for _, d := range t.blobs(top) {
			refs[d] = true
		}
	}
	return refs
}
