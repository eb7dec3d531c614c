package criruntime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/klog/v2"
)

// recoverIndex sets an unreadable index aside (renamed, never deleted, so
// it can be inspected) and rebuilds one from the content store: every
// stored image manifest whose config and layers are all stored becomes a
// recovered target without names. Names cannot be recovered: a pod's
// image is found by name only after a new pull, which asks the registry.
// Recovered images stay listed by ID until removed.
func recoverIndex(dir string, content *contentStore, cause error, logger klog.Logger) (*imageIndex, error) {
	path := filepath.Join(dir, indexFile)
	aside := path + ".unreadable-" + strconv.Itoa(os.Getpid())
	for i := 1; ; i++ {
		if _, err := os.Lstat(aside); os.IsNotExist(err) {
			break
		}
		aside = path + ".unreadable-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
	}
	if err := os.Rename(path, aside); err != nil {
		return nil, fmt.Errorf("failed to set the unreadable image index aside (%v): %w", cause, err)
	}
	idx := newImageIndex()
	var errs int
	err := content.walk(func(d v1.Hash, size int64) {
		if size > maxMetadataBlob {
			return
		}
		raw, err := content.read(d)
		if err != nil {
			errs++
			return
		}
		if t := recoverTarget(content, d, raw); t != nil {
			idx.Targets[d] = t
		}
	})
	if err != nil {
		return nil, fmt.Errorf("failed to rebuild the image index: %w", err)
	}
	idx.build()
	if err := idx.save(dir); err != nil {
		return nil, err
	}
	logger.Error(cause, "The image index was unreadable: it was set aside and rebuilt from the content store; image names are pulled again",
		"setAside", aside, "recoveredImages", len(idx.list), "unreadableBlobs", errs)
	return idx, nil
}

// recoverTarget returns the target of raw when it is an image manifest
// whose config and layers are all stored, else nil.
func recoverTarget(content *contentStore, d v1.Hash, raw []byte) *target {
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		return nil
	}
	mt := mediaTypeOf("", raw)
	if !mt.IsImage() {
		return nil
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil || m.Config.Digest.Hex == "" {
		return nil
	}
	t := &target{MediaType: string(mt), Manifest: d, Config: m.Config.Digest, Size: uint64(len(raw)), Recovered: true}
	for _, b := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if !content.has(b.Digest) {
			return nil
		}
		t.Size += uint64(max(b.Size, 0))
	}
	cfgRaw, err := content.read(m.Config.Digest)
	if err != nil {
		return nil
	}
	var cfg v1.ConfigFile
	if json.Unmarshal(cfgRaw, &cfg) != nil {
		return nil
	}
	t.User = cfg.Config.User
	for _, l := range m.Layers {
		t.Layers = append(t.Layers, l.Digest)
	}
	return t
}
