package criruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// blobSource opens a blob that is not in the content store yet.
type blobSource func(ctx context.Context, desc v1.Descriptor) (io.ReadCloser, error)

// storeImage makes sure the config and layers of an image manifest (already
// stored) are in the content store, fetching the missing ones from src, and
// returns the target to record under top. With pr, the registry must prove
// it holds the ones already stored. The caller holds l.
func (e *Embedded) storeImage(ctx context.Context, l *lease, top v1.Hash, topType types.MediaType, topSize int64,
	manifest v1.Hash, manifestRaw []byte, src blobSource, pr *prover) (*target, error) {
	m, err := v1.ParseManifest(bytes.NewReader(manifestRaw))
	if err != nil {
		return nil, fmt.Errorf("%w: manifest %s: %v", ErrUnsupportedManifest, manifest, err)
	}
	blobs := append([]v1.Descriptor{m.Config}, m.Layers...)
	size := uint64(max(topSize, 0))
	if manifest != top {
		size += uint64(len(manifestRaw))
	}
	for _, b := range blobs {
		l.add(b.Digest)
		size += uint64(max(b.Size, 0))
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(e.opts.downloads)
	for i, b := range blobs {
		if e.content.has(b.Digest) {
			if pr != nil {
				g.Go(func() error { return pr.prove(gctx, b, i == 0) })
			}
			continue
		}
		g.Go(func() error {
			rc, err := src(gctx, b)
			if err != nil {
				return err
			}
			defer rc.Close()
			return e.content.write(gctx, b.Digest, b.Size, rc)
		})
	}
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}

	cfgRaw, err := e.content.read(m.Config.Digest)
	if err != nil {
		return nil, err
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(cfgRaw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: config %s: %v", ErrUnsupportedManifest, m.Config.Digest, err)
	}
	if err := e.content.sync(); err != nil {
		return nil, fmt.Errorf("failed to sync content store: %w", err)
	}
	t := &target{
		MediaType: string(topType),
		Manifest:  manifest,
		Config:    m.Config.Digest,
		Size:      size,
		User:      cfg.Config.User,
	}
	for _, layer := range m.Layers {
		t.Layers = append(t.Layers, layer.Digest)
	}
	return t, nil
}

// addNames points names at top and returns the image ID. With t nil, top
// must be stored already; found is false (and nothing changes) when it is
// not. A name already pointing at top costs no write.
func (e *Embedded) addNames(top v1.Hash, t *target, names []string) (id v1.Hash, found bool, err error) {
	if cur, ok := e.idx.Load().Targets[top]; ok && e.pointsAt(names, top) {
		return cur.Config, true, nil
	}
	err = e.update(func(idx *imageIndex) bool {
		cur, ok := idx.Targets[top]
		if !ok {
			if t == nil {
				return false
			}
			idx.Targets[top], cur = t, t
		}
		found, id = true, cur.Config
		changed := !ok
		for _, n := range names {
			if old, ok := idx.Names[n]; !ok || old != top {
				idx.Names[n] = top
				changed = true
			}
		}
		return changed
	})
	return id, found, err
}

func (e *Embedded) pointsAt(names []string, top v1.Hash) bool {
	idx := e.idx.Load()
	for _, n := range names {
		if idx.Names[n] != top {
			return false
		}
	}
	return true
}

// namesFor is what a pull of ref that resolved to top records: the tag and
// repo@top for a tag reference, repo@top for a digest reference.
func namesFor(ref name.Reference, top v1.Hash) []string {
	dn := digestName(ref.Context(), top)
	if _, ok := ref.(name.Digest); ok {
		return []string{dn}
	}
	return []string{canonicalName(ref), dn}
}

// Load side-loads img under ref without contacting any registry, the way an
// operator preloads a node's images (ctr images import, a VM image). ref is
// a tag or a digest reference (whose digest must be img's manifest digest).
// It returns the image ID. To load a "docker save" tarball, open it with
// go-containerregistry's tarball.ImageFromPath and pass the result here.
func (e *Embedded) Load(ctx context.Context, ref string, img v1.Image) (string, error) {
	r, err := parseReference(ref)
	if err != nil {
		return "", err
	}
	id, err := e.load(ctx, r, img)
	if err != nil {
		return "", fmt.Errorf("failed to load image %q: %w", canonicalName(r), err)
	}
	e.opts.logger.V(2).Info("Loaded image", "image", canonicalName(r), "imageID", id)
	return id.String(), nil
}

func (e *Embedded) load(ctx context.Context, r name.Reference, img v1.Image) (v1.Hash, error) {
	top, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if d, ok := r.(name.Digest); ok && d.DigestStr() != top.String() {
		return v1.Hash{}, fmt.Errorf("%w: image is %s, reference names %s", ErrDigestMismatch, top, d.DigestStr())
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Hash{}, err
	}
	if !mt.IsImage() {
		return v1.Hash{}, fmt.Errorf("%w: media type %q", ErrUnsupportedManifest, mt)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	cfgRaw, err := img.RawConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	l := e.newLease()
	defer l.release()
	l.add(top)
	if err := e.content.write(ctx, top, int64(len(raw)), bytes.NewReader(raw)); err != nil {
		return v1.Hash{}, err
	}
	src := func(_ context.Context, desc v1.Descriptor) (io.ReadCloser, error) {
		cfgName, err := img.ConfigName()
		if err == nil && desc.Digest == cfgName {
			return io.NopCloser(bytes.NewReader(cfgRaw)), nil
		}
		layer, err := img.LayerByDigest(desc.Digest)
		if err != nil {
			return nil, err
		}
		return layer.Compressed()
	}
	t, err := e.storeImage(ctx, l, top, mt, int64(len(raw)), top, raw, src, nil)
	if err != nil {
		return v1.Hash{}, err
	}
	id, _, err := e.addNames(top, t, namesFor(r, top))
	return id, err
}
